# A hash of 200003 growing strings and a running checksum: a real program
# rewriting its heap, for bench/real-programs.sh.
my %h; my $s = 0;
for my $i (1..15_000_000) { $h{$i % 200003} .= chr(65 + $i % 26); $s = ($s * 31 + $i) % 1000000007; }
my $t = 0; $t += length($h{$_}) for keys %h; print "$s $t\n";
