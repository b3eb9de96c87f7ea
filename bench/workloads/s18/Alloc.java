import java.util.*;
public class Alloc {
    public static void main(String[] a) throws Exception {
        int n = Integer.parseInt(a[0]);
        long h = 1469598103934665603L;
        ArrayList<int[]> keep = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            int[] x = new int[64 + (i % 512)];
            for (int j = 0; j < x.length; j += 16) x[j] = i * 31 + j;
            if (i % 97 == 0) keep.add(x);
            if (keep.size() > 2000) keep.subList(0, 1000).clear();
            h = (h ^ x[x.length / 2 / 16 * 16]) * 1099511628211L;
            if (i % 100000 == 0) { System.out.println(i + " " + h + " " + keep.size()); Thread.sleep(20); }
        }
        System.out.println("done " + h);
    }
}
