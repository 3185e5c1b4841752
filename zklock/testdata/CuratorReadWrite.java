import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.RetryOneTime;

/**
 * CuratorReadWrite holds the read or the write lock of Apache Curator's
 * InterProcessReadWriteLock on a path, for the interoperability tests of
 * package zklock. Usage: CuratorReadWrite CONNECT PATH.
 *
 * <p>It prints "ready SESSION" (the session id in hex) once connected, then
 * reads commands from stdin, one per line, each naming the lock, "read" or
 * "write", and answers each with one line: "read acquire" waits for the
 * read lock and answers "held"; "read try MILLIS" waits at most that long
 * and answers "held" or "timeout"; "read release" answers "released"; and
 * the same for "write". A failure answers "error ..." and ends the
 * program. At the end of stdin, or on SIGTERM, it closes its session,
 * which deletes its nodes.
 */
public final class CuratorReadWrite {
    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: CuratorReadWrite CONNECT PATH");
            System.exit(2);
        }
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(args[0])
                .sessionTimeoutMs(10000)
                .connectionTimeoutMs(10000)
                .retryPolicy(new RetryOneTime(100))
                .build();
        Runtime.getRuntime().addShutdownHook(new Thread(client::close));
        client.start();
        if (!client.blockUntilConnected(60, TimeUnit.SECONDS)) {
            say("error not connected after 60s");
            System.exit(1);
        }
        InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, args[1]);
        say("ready " + Long.toHexString(client.getZookeeperClient().getZooKeeper().getSessionId()));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            for (String line; (line = in.readLine()) != null; ) {
                String[] f = line.trim().split(" +");
                if (f.length < 2 || !(f[0].equals("read") || f[0].equals("write"))) {
                    say("error unknown command " + line);
                    System.exit(2);
                }
                InterProcessMutex lock = f[0].equals("read") ? rw.readLock() : rw.writeLock();
                switch (f[1]) {
                    case "acquire":
                        lock.acquire();
                        say("held");
                        break;
                    case "try":
                        say(lock.acquire(Long.parseLong(f[2]), TimeUnit.MILLISECONDS) ? "held" : "timeout");
                        break;
                    case "release":
                        lock.release();
                        say("released");
                        break;
                    default:
                        say("error unknown command " + line);
                        System.exit(2);
                }
            }
        } catch (Exception e) {
            say("error " + e);
            System.exit(1);
        }
        client.close();
    }

    private static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
