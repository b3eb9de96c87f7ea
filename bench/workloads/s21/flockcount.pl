# A perl program for the twenty-first sweep (BENCHMARKS.md): a counter in a
# file, updated under flock(LOCK_EX) and let go after each update (a
# pause of 1 ms every fourth). Prints a line every 20000 updates and a
# final checksum. Usage: perl flockcount.pl DIR N
use strict;
use warnings;
use Fcntl qw(:flock SEEK_SET);
use IO::Handle;
my ($dir, $n) = @ARGV;
open(my $fh, '+>', "$dir/counter") or die "open: $!";
my $sum = 0;
for my $i (1 .. $n) {
    flock($fh, LOCK_EX) or die "flock: $!";
    seek($fh, 0, SEEK_SET);
    my $v = <$fh>;
    $v = defined $v ? $v + 0 : 0;
    $v += $i % 7;
    seek($fh, 0, SEEK_SET);
    truncate($fh, 0);
    print $fh "$v\n";
    $fh->flush;
    flock($fh, LOCK_UN) or die "unlock: $!";
    $sum = ($sum * 31 + $v) % 1000000007;
    select(undef, undef, undef, 0.001) if $i % 4 == 0;
    print "$i $sum\n" if $i % 20000 == 0;
}
print "$sum\n";
