import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.tephra.distributed.thrift.TTransaction;
import org.apache.tephra.distributed.thrift.TTransactionServer;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.transport.TSocket;
import org.apache.thrift.transport.layered.TFramedTransport;

/**
 * Transaction cycles (startShort, canCommitOrThrow with one 16-byte key, commitOrThrow) from
 * {@code threads} threads, one connection each, through the client Apache Thrift's compiler
 * generated from the IDL. One second of warm-up (the JIT), then {@code seconds} measured.
 * Prints "measuring" when the measured window opens and "measured" when it closes (so a
 * caller can sample the server's CPU over the same window), then one JSON line: cycles,
 * seconds, p50_ms, p99_ms.
 *
 * <p>Usage: {@code TxLoad HOST PORT THREADS SECONDS}
 */
public final class TxLoad {
  private static void sleepUntil(long nanoTime) throws InterruptedException {
    long left;
    while ((left = nanoTime - System.nanoTime()) > 0) {
      Thread.sleep(left / 1_000_000, (int) (left % 1_000_000));
    }
  }

  public static void main(String[] args) throws Exception {
    String host = args[0];
    int port = Integer.parseInt(args[1]);
    int threads = Integer.parseInt(args[2]);
    double seconds = Double.parseDouble(args[3]);
    long measureFrom = System.nanoTime() + 1_000_000_000L;
    long measureTo = measureFrom + (long) (seconds * 1e9);
    AtomicLong cycles = new AtomicLong();
    List<long[]> latencies = new ArrayList<>();
    List<Thread> workers = new ArrayList<>();
    List<Throwable> failures = new ArrayList<>();
    for (int i = 0; i < threads; i++) {
      long[] sample = new long[1 << 16];
      latencies.add(sample);
      final int id = i;
      Thread worker = new Thread(() -> {
        try {
          TFramedTransport transport = new TFramedTransport(new TSocket(host, port));
          TTransactionServer.Client client =
              new TTransactionServer.Client(new TBinaryProtocol(transport));
          transport.open();
          int n = 0;
          for (long counter = 0; ; counter++) {
            long t0 = System.nanoTime();
            if (t0 >= measureTo) {
              break;
            }
            ByteBuffer key = ByteBuffer.allocate(16).putInt(id).putLong(counter).putInt(0);
            key.flip();
            TTransaction tx = client.startShort();
            client.canCommitOrThrow(tx.getTransactionId(), Set.of(key));
            client.commitOrThrow(tx.getTransactionId(), tx.getWritePointer());
            long t1 = System.nanoTime();
            if (t0 >= measureFrom && t1 <= measureTo) {
              cycles.incrementAndGet();
              if (n < sample.length) {
                sample[n++] = t1 - t0;
              }
            }
          }
          sample[sample.length - 1] = n;
          transport.close();
        } catch (Exception e) {
          synchronized (failures) {
            failures.add(e);
          }
        }
      });
      workers.add(worker);
      worker.start();
    }
    sleepUntil(measureFrom);
    System.out.println("measuring");
    System.out.flush();
    sleepUntil(measureTo);
    System.out.println("measured");
    System.out.flush();
    for (Thread worker : workers) {
      worker.join();
    }
    if (!failures.isEmpty()) {
      throw new RuntimeException("a client failed", failures.get(0));
    }
    long[] all = latencies.stream()
        .flatMapToLong(s -> Arrays.stream(s, 0, (int) Math.min(s[s.length - 1], s.length - 1)))
        .sorted().toArray();
    double p50 = all.length == 0 ? 0 : all[all.length / 2] / 1e6;
    double p99 = all.length == 0 ? 0 : all[(int) (all.length * 0.99)] / 1e6;
    System.out.printf("{\"cycles\": %d, \"seconds\": %.3f, \"p50_ms\": %.3f, \"p99_ms\": %.3f}%n",
        cycles.get(), seconds, p50, p99);
  }
}
