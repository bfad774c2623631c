import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Drives Apache RocketMQ's own Java consumers with SQL92 selectors (MessageSelector.bySql)
 * against a name server address, printing one line per event for the Python tests to check.
 *
 * <pre>
 * push NS TOPIC GROUP SECONDS SETTLE_MS (EXPECTED SQL)...
 *   one DefaultMQPushConsumer per selector (group GROUP-i, from the first offset), all at once;
 *   waits until each has EXPECTED messages or SECONDS pass, then SETTLE_MS more for extra ones
 *   prints GOT i queueId queueOffset body
 * lite NS TOPIC GROUP SECONDS SETTLE_MS (EXPECTED SQL)...
 *   one DefaultLitePullConsumer after another (subscribe with the selector, poll, commit)
 *   prints GOT i queueId queueOffset body
 * start NS TOPIC GROUP SQL
 *   starts a push consumer with the selector; prints STARTED, or START_FAILED code message
 * </pre>
 */
public class FilterProbe {
    public static void main(String[] args) throws Exception {
        try {
            switch (args[0]) {
                case "push": push(args); break;
                case "lite": lite(args); break;
                case "start": start(args[1], args[2], args[3], args[4]); break;
                default: throw new IllegalArgumentException("unknown command " + args[0]);
            }
        } catch (Exception e) {
            // the client's threads would keep the JVM alive: report and leave
            System.out.println("ERROR " + e);
            System.out.flush();
            System.exit(1);
        }
        System.out.println("DONE");
        System.out.flush();
        System.exit(0);
    }

    static synchronized void printGot(int index, MessageExt m) {
        System.out.printf("GOT %d %d %d %s%n", index, m.getQueueId(), m.getQueueOffset(),
            new String(m.getBody(), StandardCharsets.UTF_8));
        System.out.flush();
    }

    static DefaultMQPushConsumer pushConsumer(String ns, String group) {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setInstanceName("filter-" + ProcessHandle.current().pid());
        return c;
    }

    static void push(String[] a) throws Exception {
        String ns = a[1], topic = a[2], group = a[3];
        long deadline = System.currentTimeMillis() + Integer.parseInt(a[4]) * 1000L;
        long settle = Long.parseLong(a[5]);
        List<DefaultMQPushConsumer> consumers = new ArrayList<>();
        List<CountDownLatch> latches = new ArrayList<>();
        for (int i = 0; 6 + 2 * i < a.length; i++) {
            final int index = i;
            CountDownLatch latch = new CountDownLatch(Integer.parseInt(a[6 + 2 * i]));
            DefaultMQPushConsumer c = pushConsumer(ns, group + "-" + i);
            c.subscribe(topic, MessageSelector.bySql(a[7 + 2 * i]));
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) { printGot(index, m); latch.countDown(); }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            consumers.add(c);
            latches.add(latch);
        }
        System.out.println("STARTED");
        System.out.flush();
        for (CountDownLatch latch : latches) {
            latch.await(Math.max(deadline - System.currentTimeMillis(), 0), TimeUnit.MILLISECONDS);
        }
        Thread.sleep(settle);
        for (DefaultMQPushConsumer c : consumers) c.shutdown();
    }

    static void lite(String[] a) throws Exception {
        String ns = a[1], topic = a[2], group = a[3];
        int seconds = Integer.parseInt(a[4]);
        long settle = Long.parseLong(a[5]);
        for (int i = 0; 6 + 2 * i < a.length; i++) {
            int expected = Integer.parseInt(a[6 + 2 * i]);
            DefaultLitePullConsumer c = new DefaultLitePullConsumer(group + "-" + i);
            c.setNamesrvAddr(ns);
            c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            c.setInstanceName("filter-lite-" + ProcessHandle.current().pid() + "-" + i);
            c.subscribe(topic, MessageSelector.bySql(a[7 + 2 * i]));
            c.start();
            long deadline = System.currentTimeMillis() + seconds * 1000L;
            int got = 0;
            while (got < expected && System.currentTimeMillis() < deadline) {
                for (MessageExt m : c.poll(200)) { printGot(i, m); got++; }
            }
            long quiet = System.currentTimeMillis() + settle;
            while (System.currentTimeMillis() < quiet) {
                for (MessageExt m : c.poll(200)) printGot(i, m);
            }
            c.commitSync();
            c.shutdown();
        }
    }

    static void start(String ns, String topic, String group, String sql) throws Exception {
        DefaultMQPushConsumer c = pushConsumer(ns, group);
        c.subscribe(topic, MessageSelector.bySql(sql));
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) ->
            ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
        try {
            c.start();
            System.out.println("STARTED");
        } catch (MQClientException e) {
            System.out.println("START_FAILED " + e.getResponseCode() + " " + e.getErrorMessage());
        }
        System.out.flush();
        c.shutdown();
    }
}
