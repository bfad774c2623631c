import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * Drives Apache RocketMQ's own Java client against a name server address, printing one line per
 * event for the Python tests to check.
 *
 * <pre>
 * produce NS TOPIC N MODE      MODE: sync | async | oneway | batch | orderly | delay | tx | txcheck
 *   prints SENT queueId queueOffset msgId offsetMsgId   (sync, orderly, delay, tx, txcheck)
 *   txcheck: every local transaction answers UNKNOW; the broker's check commits even and
 *   rolls back odd messages (prints CHECKED seq); waits up to 60 s for N checks
 * push NS TOPIC GROUP EXPECTED SECONDS MODE [TAGS]   MODE: concurrent | orderly | broadcast | retry
 *   prints GOT queueId queueOffset reconsumeTimes tags keys body
 * lite NS TOPIC GROUP EXPECTED SECONDS
 *   subscribes, polls, commits; prints GOT ... as push does
 * seek NS TOPIC GROUP
 *   assigns every queue, seeks to the beginning and to a timestamp; prints SEEK lines
 * </pre>
 * With PROBE_ACCESS_KEY and PROBE_SECRET_KEY in the environment, every client signs its
 * requests with RocketMQ's AclClientRPCHook.
 */
public class RemotingProbe {
    public static void main(String[] args) throws Exception {
        try {
            switch (args[0]) {
                case "produce": produce(args[1], args[2], Integer.parseInt(args[3]), args[4]); break;
                case "push": push(args); break;
                case "lite": lite(args[1], args[2], args[3], Integer.parseInt(args[4]), Integer.parseInt(args[5])); break;
                case "seek": seek(args[1], args[2], args[3]); break;
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

    static RPCHook hook() {
        String ak = System.getenv("PROBE_ACCESS_KEY"), sk = System.getenv("PROBE_SECRET_KEY");
        return ak == null ? null : new AclClientRPCHook(new SessionCredentials(ak, sk));
    }

    static Message message(String topic, int i) {
        Message m = new Message(topic, i % 2 == 0 ? "TagA" : "TagB", "key-" + i,
            ("body-" + i).getBytes(StandardCharsets.UTF_8));
        m.putUserProperty("seq", Integer.toString(i));
        return m;
    }

    static void printSent(SendResult r) {
        System.out.printf("SENT %d %d %s %s %s%n", r.getMessageQueue().getQueueId(), r.getQueueOffset(),
            r.getMsgId(), r.getOffsetMsgId(), r.getSendStatus());
    }

    static void produce(String ns, String topic, int n, String mode) throws Exception {
        if (mode.equals("tx") || mode.equals("txcheck")) {
            transactions(ns, topic, n, mode.equals("txcheck"));
            return;
        }
        DefaultMQProducer p = new DefaultMQProducer("probe-producer", hook());
        p.setNamesrvAddr(ns);
        p.start();
        if (mode.equals("batch")) {
            List<Message> batch = new ArrayList<>();
            for (int i = 0; i < n; i++) batch.add(message(topic, i));
            SendResult r = p.send(batch);
            System.out.printf("BATCH %d %d %s%n", r.getMessageQueue().getQueueId(), r.getQueueOffset(), r.getSendStatus());
        } else if (mode.equals("async")) {
            CountDownLatch done = new CountDownLatch(n);
            AtomicInteger failed = new AtomicInteger();
            for (int i = 0; i < n; i++) {
                p.send(message(topic, i), new SendCallback() {
                    public void onSuccess(SendResult r) { printSent(r); done.countDown(); }
                    public void onException(Throwable e) { failed.incrementAndGet(); System.out.println("FAILED " + e); done.countDown(); }
                });
            }
            done.await(60, TimeUnit.SECONDS);
        } else {
            for (int i = 0; i < n; i++) {
                Message m = message(topic, i);
                if (mode.equals("oneway")) {
                    p.sendOneway(m);
                } else if (mode.equals("orderly")) {
                    printSent(p.send(m, (mqs, msg, key) -> mqs.get((Integer) key % mqs.size()), i % 3));
                } else {
                    if (mode.equals("delay")) m.setDelayTimeLevel(1);
                    printSent(p.send(m));
                }
            }
        }
        p.shutdown();
    }

    static void transactions(String ns, String topic, int n, boolean checked) throws Exception {
        TransactionMQProducer p = new TransactionMQProducer("probe-tx-producer");
        p.setNamesrvAddr(ns);
        CountDownLatch checks = new CountDownLatch(n);
        p.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                if (checked) return LocalTransactionState.UNKNOW;
                int i = Integer.parseInt(msg.getProperty("seq"));
                return i % 2 == 0 ? LocalTransactionState.COMMIT_MESSAGE : LocalTransactionState.ROLLBACK_MESSAGE;
            }
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                int i = Integer.parseInt(msg.getProperty("seq"));
                System.out.println("CHECKED " + i + " " + msg.getTopic() + " " + msg.getQueueId());
                System.out.flush();
                checks.countDown();
                return i % 2 == 0 ? LocalTransactionState.COMMIT_MESSAGE : LocalTransactionState.ROLLBACK_MESSAGE;
            }
        });
        p.start();
        for (int i = 0; i < n; i++) printSent(p.sendMessageInTransaction(message(topic, i), null));
        if (checked) checks.await(60, TimeUnit.SECONDS);
        Thread.sleep(500); // END_TRANSACTION is oneway: let it leave before the socket closes
        p.shutdown();
    }

    static void printGot(MessageExt m) {
        System.out.printf("GOT %d %d %d %s %s %s%n", m.getQueueId(), m.getQueueOffset(), m.getReconsumeTimes(),
            m.getTags(), m.getKeys(), new String(m.getBody(), StandardCharsets.UTF_8));
        System.out.flush();
    }

    static void push(String[] a) throws Exception {
        String ns = a[1], topic = a[2], group = a[3], mode = a[6];
        int expected = Integer.parseInt(a[4]), seconds = Integer.parseInt(a[5]);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, hook(), new AllocateMessageQueueAveragely());
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setInstanceName("probe-" + ProcessHandle.current().pid());
        if (mode.equals("broadcast")) c.setMessageModel(MessageModel.BROADCASTING);
        c.subscribe(topic, a.length > 7 ? a[7] : "*");
        CountDownLatch done = new CountDownLatch(expected);
        if (mode.equals("orderly")) {
            c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                for (MessageExt m : msgs) { printGot(m); done.countDown(); }
                return ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    printGot(m);
                    if (mode.equals("retry") && m.getReconsumeTimes() == 0) {
                        return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                    }
                    done.countDown();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        }
        c.start();
        System.out.println("STARTED");
        System.out.flush();
        done.await(seconds, TimeUnit.SECONDS);
        c.shutdown();
    }

    static void lite(String ns, String topic, String group, int expected, int seconds) throws Exception {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setAutoCommit(false);
        c.subscribe(topic, "*");
        long started = System.currentTimeMillis();
        c.start();
        long deadline = started + seconds * 1000L;
        int got = 0;
        while (got < expected && System.currentTimeMillis() < deadline) {
            List<MessageExt> polled = c.poll(100);
            if (got == 0 && !polled.isEmpty()) {
                System.out.printf("FIRST %d%n", System.currentTimeMillis() - started);
            }
            for (MessageExt m : polled) { printGot(m); got++; }
            c.commitSync();
        }
        c.commitSync();
        c.shutdown();
    }

    static void seek(String ns, String topic, String group) throws Exception {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group);
        c.setNamesrvAddr(ns);
        c.start();
        Collection<MessageQueue> queues = c.fetchMessageQueues(topic);
        List<MessageQueue> sorted = new ArrayList<>(queues);
        sorted.sort(null);
        c.assign(sorted);
        for (MessageQueue mq : sorted) {
            long byTime = c.offsetForTimestamp(mq, 0L);
            c.seekToEnd(mq);
            System.out.printf("SEEK %d byTime0=%d%n", mq.getQueueId(), byTime);
            c.seekToBegin(mq);
        }
        int got = 0;
        long deadline = System.currentTimeMillis() + 20000;
        while (System.currentTimeMillis() < deadline) {
            List<MessageExt> msgs = c.poll(1000);
            if (msgs.isEmpty() && got > 0) break;
            for (MessageExt m : msgs) { printGot(m); got++; }
        }
        c.shutdown();
    }
}
