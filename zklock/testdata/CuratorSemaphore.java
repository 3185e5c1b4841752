import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryOneTime;

/**
 * CuratorSemaphore holds leases of Apache Curator's InterProcessSemaphoreV2
 * on a path, for the interoperability tests of package zklock. Usage:
 * CuratorSemaphore CONNECT PATH MAXLEASES.
 *
 * <p>It prints "ready SESSION" (the session id in hex) once connected, then
 * reads commands from stdin, one per line, and answers each with one line:
 * "acquire" waits for a lease and answers "held NODE" (the lease node's
 * name); "try MILLIS" waits at most that long and answers "held NODE" or
 * "timeout"; "release" gives back the oldest lease it holds and answers
 * "released". A failure answers "error ..." and ends the program. At the
 * end of stdin, or on SIGTERM, it closes its session, which deletes its
 * nodes.
 */
public final class CuratorSemaphore {
    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: CuratorSemaphore CONNECT PATH MAXLEASES");
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
        InterProcessSemaphoreV2 semaphore = new InterProcessSemaphoreV2(client, args[1], Integer.parseInt(args[2]));
        ArrayDeque<Lease> held = new ArrayDeque<>();
        say("ready " + Long.toHexString(client.getZookeeperClient().getZooKeeper().getSessionId()));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            for (String line; (line = in.readLine()) != null; ) {
                String[] f = line.trim().split(" +");
                switch (f[0]) {
                    case "acquire": {
                        Lease lease = semaphore.acquire();
                        held.add(lease);
                        say("held " + lease.getNodeName());
                        break;
                    }
                    case "try": {
                        Lease lease = semaphore.acquire(Long.parseLong(f[1]), TimeUnit.MILLISECONDS);
                        if (lease == null) {
                            say("timeout");
                        } else {
                            held.add(lease);
                            say("held " + lease.getNodeName());
                        }
                        break;
                    }
                    case "release":
                        semaphore.returnLease(held.remove());
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
