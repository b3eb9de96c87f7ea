// Parallel streams (ForkJoin common pool) and allocation-heavy rounds (GC), deterministic sums.
import java.util.*;
import java.util.stream.*;
public class JPar {
    public static void main(String[] a) {
        int rounds = a.length > 0 ? Integer.parseInt(a[0]) : 40;
        for (int r = 0; r < rounds; r++) {
            final int rr = r;
            long s = IntStream.range(0, 2_000_000).parallel().mapToLong(i -> (long) (i * 31L + rr) % 1009).sum();
            Map<Integer, List<String>> m = IntStream.range(0, 200_000).boxed()
                .collect(Collectors.groupingByConcurrent(i -> i % 997, Collectors.mapping(i -> "v" + (i * rr % 101), Collectors.toList())));
            long t = m.values().stream().mapToLong(List::size).sum();
            System.out.println("round " + r + " " + s + " " + t + " " + m.size());
        }
    }
}
