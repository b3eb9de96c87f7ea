// A service between requests: it builds a table that fills most of its
// heap, then answers a small "request" every few milliseconds, allocating
// little, and prints a running checksum. Run with ZGC and a small heap,
// its heap is a memfd that changes little between two captures.
// Usage: java -XX:+UseZGC -Xmx64m Service TABLE_MB REQUESTS
public class Service {
    public static void main(String[] args) throws Exception {
        int mb = Integer.parseInt(args[0]);
        int requests = Integer.parseInt(args[1]);
        byte[][] table = new byte[mb * 16][];
        for (int i = 0; i < table.length; i++) {
            table[i] = new byte[64 << 10];
            for (int j = 0; j < table[i].length; j += 512) {
                table[i][j] = (byte) (i * 31 + j);
            }
        }
        long sum = 0;
        for (int r = 0; r < requests; r++) {
            byte[] row = table[(r * 7) % table.length];
            int at = (r * 512) % row.length;
            row[at] = (byte) (row[at] + 1);
            StringBuilder reply = new StringBuilder();
            reply.append("request ").append(r).append(' ').append(row[at]);
            sum += reply.toString().hashCode();
            if (r % 200 == 0) {
                System.out.println(reply + " sum " + sum);
            }
            Thread.sleep(5);
        }
        System.out.println("done " + sum);
    }
}
