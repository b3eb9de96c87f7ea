// File channels (which make the JVM hold a unix socket with no live peer),
// a pool of four threads and a growing map, with a deterministic digest per
// round: a Java program for bench/sweep51-cases.txt.
// Usage: java NioWork.java FILE ROUNDS
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.*;
import java.security.MessageDigest;
import java.util.*;
import java.util.concurrent.*;

public class NioWork {
    public static void main(String[] a) throws Exception {
        Path p = Paths.get(a[0]);
        int rounds = Integer.parseInt(a[1]);
        ExecutorService pool = Executors.newFixedThreadPool(4);
        Map<Integer, byte[]> kept = new HashMap<>();
        try (FileChannel ch = FileChannel.open(p, StandardOpenOption.READ)) {
            long size = ch.size();
            for (int r = 0; r < rounds; r++) {
                final int rr = r;
                List<Future<byte[]>> parts = new ArrayList<>();
                for (int k = 0; k < 4; k++) {
                    final int kk = k;
                    parts.add(pool.submit(() -> {
                        MessageDigest md = MessageDigest.getInstance("SHA-256");
                        ByteBuffer b = ByteBuffer.allocate(1 << 16);
                        long off = ((long) (rr * 4 + kk) * 7919L * 4096L) % Math.max(1, size - (1 << 16));
                        for (int i = 0; i < 16; i++) {
                            b.clear();
                            ch.read(b, (off + (long) i * 4096L) % size);
                            b.flip();
                            md.update(b);
                        }
                        return md.digest();
                    }));
                }
                MessageDigest all = MessageDigest.getInstance("SHA-256");
                for (Future<byte[]> f : parts) all.update(f.get());
                byte[] d = all.digest();
                kept.put(r % 5000, new byte[2048 + (d[0] & 0xff)]);
                if (r % 100 == 0) {
                    System.out.printf("round %d %02x%02x%02x%02x %d%n", r, d[0], d[1], d[2], d[3], kept.size());
                }
            }
        }
        pool.shutdown();
        System.out.println("done " + kept.size());
    }
}
