// bench/workloads/s25/ZeroArrays.java - a Java heap that is mostly zeros
// (BENCHMARKS.md, "Pages of zeros in the page streams (protocol 17)").
// Usage: java -XX:+UseSerialGC ZeroArrays.java ARRAYS ROUNDS
// Keeps ARRAYS int[10000] (40 KB each) whose first quarter holds values and
// whose rest stays the zeros the JVM cleared them to, as a program's
// partly filled buffers do; then, ROUNDS times 10 ms apart, rewrites the
// filled part of one array and folds every array into a hash, which it
// prints at the end (the same on every run).
public class ZeroArrays {
    public static void main(String[] a) throws Exception {
        int n = Integer.parseInt(a[0]);
        int rounds = Integer.parseInt(a[1]);
        int[][] keep = new int[n][];
        long seed = 88172645463325252L;
        for (int i = 0; i < n; i++) {
            keep[i] = new int[10000];
            for (int j = 0; j < 2500; j++) {
                seed ^= seed << 13; seed ^= seed >>> 7; seed ^= seed << 17;
                keep[i][j] = (int) seed;
            }
        }
        long h = 1469598103934665603L;
        for (int r = 0; r < rounds; r++) {
            int[] x = keep[r % n];
            for (int j = 0; j < 2500; j++) x[j] = x[j] * 31 + r;
            for (int[] y : keep) {
                h = (h ^ y[r % 2500]) * 1099511628211L;
                h = (h ^ y[9999 - r % 7500]) * 1099511628211L;
            }
            if (r % 100 == 0) System.out.println(r + " " + h);
            Thread.sleep(10);
        }
        System.out.println("done " + h);
    }
}
