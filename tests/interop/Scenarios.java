import java.nio.ByteBuffer;
import java.util.*;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.transport.TSocket;
import org.apache.thrift.transport.layered.TFramedTransport;
import org.apache.tephra.distributed.thrift.*;

/**
 * Tephra's scenarios through a client that Apache Thrift's compiler generated from the IDL,
 * on Apache Thrift's Java library: the same scenarios as scenarios.py. Run by
 * {@code python -m tests.interop}, which generates and compiles the client.
 */
public class Scenarios {
  static void check(boolean ok, String what) { if (!ok) throw new AssertionError(what); }
  static Set<ByteBuffer> keys(String... ks) {
    Set<ByteBuffer> s = new HashSet<>();
    for (String k : ks) s.add(ByteBuffer.wrap(k.getBytes()));
    return s;
  }
  interface Call { void run() throws Exception; }
  static <E extends Exception> E expect(Class<E> cls, Call c) throws Exception {
    try { c.run(); } catch (Exception e) { if (cls.isInstance(e)) return cls.cast(e); throw e; }
    throw new AssertionError("expected " + cls.getSimpleName());
  }

  public static void main(String[] args) throws Exception {
    TSocket sock = new TSocket(args[0], Integer.parseInt(args[1]));
    TFramedTransport trans = new TFramedTransport(sock);
    TTransactionServer.Client c = new TTransactionServer.Client(new TBinaryProtocol(trans));
    trans.open();

    check(c.status().equals("OK"), "status");
    TTransaction tx = c.startShort();
    check(tx.getType() == TTransactionType.SHORT && tx.getWritePointer() == tx.getTransactionId(), "start " + tx);
    check(tx.getVisibilityLevel() == TVisibilityLevel.SNAPSHOT, "visibility");
    c.canCommitOrThrow(tx.getTransactionId(), keys("row1"));
    c.commitOrThrow(tx.getTransactionId(), tx.getWritePointer());
    TTransaction tx2 = c.startShortClientId("generated-java");
    check(tx2.getTransactionId() > tx.getTransactionId() && !tx2.getInProgress().contains(tx.getTransactionId()), "after commit");
    check(c.commitTx(tx2).isValue(), "commitTx");

    TTransaction a = c.startShortWithTimeout(30);
    TTransaction b = c.startShortWithClientIdAndTimeOut("loser", 30);
    c.canCommitOrThrow(a.getTransactionId(), keys("k"));
    c.commitOrThrow(a.getTransactionId(), a.getWritePointer());
    TTransactionConflictException ce = expect(TTransactionConflictException.class,
        () -> c.canCommitOrThrow(b.getTransactionId(), keys("k")));
    check(ce.getTransactionId() == b.getTransactionId() && ce.getConflictingKey() != null, "conflict " + ce);
    check(!c.canCommitTx(b, keys("k")).isValue(), "canCommitTx false");
    c.abortTx(b);
    expect(TTransactionNotInProgressException.class, () -> c.commitOrThrow(b.getTransactionId(), b.getWritePointer()));
    expect(TTransactionNotInProgressException.class, () -> c.canCommitOrThrow(12345L, keys("x")));
    TGenericException ge = expect(TGenericException.class, () -> c.startShortWithTimeout(-1));
    check("java.lang.IllegalArgumentException".equals(ge.getOriginalExceptionClass()), "generic " + ge);

    int size0 = c.invalidTxSize();
    TTransaction lg = c.startLongClientId("long-client");
    check(lg.getType() == TTransactionType.LONG, "long");
    c.abortTx(lg);
    check(c.invalidTxSize() == size0 + 1, "long abort invalidates");
    TTransaction nxt = c.startShortTimeout(10);
    check(nxt.getInvalids().contains(lg.getTransactionId()), "invalids");
    check(c.invalidateTx(nxt.getTransactionId()), "invalidate");
    check(!c.invalidateTx(nxt.getTransactionId()), "invalidate twice");
    check(c.truncateInvalidTx(new HashSet<>(List.of(lg.getTransactionId()))).isValue(), "truncate ids");
    check(c.invalidTxSize() == size0 + 1, "size after truncate");
    TTransaction old = c.startShort();
    long later = System.currentTimeMillis() + 1000;
    expect(TInvalidTruncateTimeException.class, () -> c.truncateInvalidTxBefore(later));
    c.abortTx(old);
    check(c.truncateInvalidTxBefore(later).isValue(), "truncate before");
    check(c.invalidTxSize() == 0, "empty invalid list");

    TTransaction t = c.startShort();
    TTransaction cp = c.checkpoint(t);
    check(cp.getTransactionId() == t.getTransactionId() && cp.getWritePointer() > t.getWritePointer(), "checkpoint");
    check(cp.getCheckpointWritePointers().equals(List.of(cp.getWritePointer())), "checkpoint pointers");
    c.canCommitOrThrow(cp.getTransactionId(), keys("c"));
    c.commitOrThrow(cp.getTransactionId(), cp.getWritePointer());
    expect(TTransactionNotInProgressException.class, () -> c.checkpoint(t));

    ByteBuffer snap = c.getSnapshot();
    check(snap.remaining() > 8, "snapshot");
    c.pruneNow();
    c.resetState();
    check(c.invalidTxSize() == 0 && c.status().equals("OK"), "after reset");
    for (int i = 0; i < 100; i++) {
      TTransaction x = c.startShort();
      c.canCommitOrThrow(x.getTransactionId(), new HashSet<>());
      c.commitOrThrow(x.getTransactionId(), x.getWritePointer());
    }
    trans.close();
    System.out.println("java scenarios OK");
  }
}
