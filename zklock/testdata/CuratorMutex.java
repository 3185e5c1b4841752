import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;

/**
 * CuratorMutex holds Apache Curator's InterProcessMutex on a path, for the
 * interoperability tests of package zklock. Usage: CuratorMutex CONNECT PATH.
 *
 * <p>It prints "ready SESSION" (the session id in hex) once connected, then
 * reads commands from stdin, one per line, and answers each with one line:
 * "acquire" waits for the lock and answers "held"; "try MILLIS" waits at most
 * that long and answers "held" or "timeout"; "release" answers "released".
 * A failure answers "error ..." and ends the program. At the end of stdin, or
 * on SIGTERM, it closes its session, which deletes its node.
 */
public final class CuratorMutex {
    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: CuratorMutex CONNECT PATH");
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
        InterProcessMutex mutex = new InterProcessMutex(client, args[1]);
        say("ready " + Long.toHexString(client.getZookeeperClient().getZooKeeper().getSessionId()));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            for (String line; (line = in.readLine()) != null; ) {
                String[] f = line.trim().split(" +");
                switch (f[0]) {
                    case "acquire":
                        mutex.acquire();
                        say("held");
                        break;
                    case "try":
                        say(mutex.acquire(Long.parseLong(f[1]), TimeUnit.MILLISECONDS) ? "held" : "timeout");
                        break;
                    case "release":
                        mutex.release();
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
