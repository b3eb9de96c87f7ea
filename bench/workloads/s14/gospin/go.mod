module gospin

go 1.18
