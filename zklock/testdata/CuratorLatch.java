import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.retry.RetryOneTime;

/**
 * CuratorLatch takes part in an election with Apache Curator's LeaderLatch,
 * for the interoperability tests of package zklock. Usage: CuratorLatch
 * CONNECT PATH ID, where PATH is the latch path and ID the participant id.
 *
 * <p>It prints "ready SESSION" (the session id in hex) once connected, then
 * reads commands from stdin, one per line, and answers each with one line:
 * "start" starts the latch and answers "started"; "has" answers "true" or
 * "false", whether the latch has leadership; "leader" answers "leader ID"
 * with the participant id of the leader that getLeader reads from
 * ZooKeeper, or "none"; "close" closes the latch and answers "closed". The
 * latch's listener prints "event isLeader" and "event notLeader" as they
 * come. A failure answers "error ..." and ends the program. At the end of
 * stdin, or on SIGTERM, it closes its session, which deletes its node.
 */
public final class CuratorLatch {
    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: CuratorLatch CONNECT PATH ID");
            System.exit(2);
        }
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(args[0])
                .sessionTimeoutMs(15000)
                .connectionTimeoutMs(10000)
                .retryPolicy(new RetryOneTime(100))
                .build();
        Runtime.getRuntime().addShutdownHook(new Thread(client::close));
        client.start();
        if (!client.blockUntilConnected(60, TimeUnit.SECONDS)) {
            say("error not connected after 60s");
            System.exit(1);
        }
        LeaderLatch latch = new LeaderLatch(client, args[1], args[2]);
        latch.addListener(new LeaderLatchListener() {
            @Override
            public void isLeader() {
                say("event isLeader");
            }

            @Override
            public void notLeader() {
                say("event notLeader");
            }
        });
        say("ready " + Long.toHexString(client.getZookeeperClient().getZooKeeper().getSessionId()));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            for (String line; (line = in.readLine()) != null; ) {
                switch (line.trim()) {
                    case "start":
                        latch.start();
                        say("started");
                        break;
                    case "has":
                        say(Boolean.toString(latch.hasLeadership()));
                        break;
                    case "leader":
                        Participant p = latch.getLeader();
                        say(p.isLeader() ? "leader " + p.getId() : "none");
                        break;
                    case "close":
                        latch.close();
                        say("closed");
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

    private static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
