module preempt

go 1.18
