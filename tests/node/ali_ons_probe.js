'use strict';
// Drives the ali-ons RocketMQ client (pure JavaScript, remoting protocol) against a name
// server address for tests/integration/test_remoting_ali_ons.py. One line per event on
// stdout, the word first and JSON after it:
//
//   node ali_ons_probe.js produce --namesrv H:P --topic T --count N --prefix P
//     SENT {"i","status","queueId","queueOffset","msgId","tags","keys","body"} per message,
//     then DONE.  Message i has tags TagA (even i) or TagB (odd i), keys "k<i> P-<i>",
//     body "P-<i> ✓" and the user properties seq=<i>, origin=ali-ons.
//   node ali_ons_probe.js consume --namesrv H:P --topic T --group G --expr EXPR
//                         --instance NAME [--expect N] [--linger-ms MS]
//     READY once started, ASSIGNED {"queueIds"} when its queues change, PULLED
//     {"queueId","tags"} per pull that found messages (what the broker sent), GOT {...} per
//     message handed to the handler, then CLOSED. It stops after N messages (and
//     --linger-ms more), or on a line STOP (or end of input) on stdin.
//
// Every run ends by itself: --deadline-ms (default 30 s) prints TIMEOUT and exits with 3.
// Client errors print ERROR {"name","message"}; they do not stop the run.

const { Producer, Consumer, Message } = require('ali-ons');
const httpclient = require('urllib');

function parseArgs(argv) {
  const args = { _: [] };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i].startsWith('--')) {
      args[argv[i].slice(2)] = argv[i + 1];
      i++;
    } else {
      args._.push(argv[i]);
    }
  }
  return args;
}

function emit(event, data) {
  process.stdout.write(data === undefined ? `${event}\n` : `${event} ${JSON.stringify(data)}\n`);
}

function onError(err) {
  emit('ERROR', { name: err.name, code: err.code, message: String(err.message) });
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

function clientOptions(args) {
  return {
    nameSrv: args.namesrv,
    httpclient,
    clientIP: '127.0.0.1',
    instanceName: args.instance || `probe-${process.pid}`,
    // ali-ons ignores the broker's NOTIFY_CONSUMER_IDS_CHANGED; it rebalances on a timer
    rebalanceInterval: 500,
    persistConsumerOffsetInterval: 1000,
    heartbeatBrokerInterval: 1000,
  };
}

async function produce(args) {
  const count = Number(args.count);
  const producer = new Producer({ ...clientOptions(args), producerGroup: args.group || 'ali-ons-producer' });
  producer.on('error', onError);
  await producer.ready();
  for (let i = 0; i < count; i++) {
    const tags = i % 2 === 0 ? 'TagA' : 'TagB';
    const body = `${args.prefix}-${i} \u2713`;
    const msg = new Message(args.topic, tags, body);
    msg.keys = [ `k${i}`, `${args.prefix}-${i}` ];
    msg.properties.seq = String(i);
    msg.properties.origin = 'ali-ons';
    const result = await producer.send(msg);
    emit('SENT', {
      i, status: result.sendStatus, queueId: result.messageQueue.queueId,
      queueOffset: result.queueOffset, msgId: result.msgId, tags, keys: msg.keys, body,
    });
  }
  await producer.close();
  emit('DONE');
}

async function consume(args) {
  const expect = args.expect === undefined ? Infinity : Number(args.expect);
  const consumer = new Consumer({
    ...clientOptions(args),
    consumerGroup: args.group,
    consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET',
    brokerSuspendMaxTimeMillis: 2000,
    consumerTimeoutMillisWhenSuspend: 5000,
    pullTimeDelayMillsWhenException: 500,
  });
  consumer.on('error', onError);

  // what the broker sent, before ali-ons filters by tag on its side
  const pullKernelImpl = consumer.pullKernelImpl;
  consumer.pullKernelImpl = async function(...pullArgs) {
    const result = await pullKernelImpl.apply(this, pullArgs);
    if (result.msgFoundList && result.msgFoundList.length) {
      emit('PULLED', { queueId: pullArgs[0].queueId, tags: result.msgFoundList.map(m => m.tags || null) });
    }
    return result;
  };

  let received = 0;
  let inFlight = 0;
  let stopRequested;
  const stopped = new Promise(resolve => { stopRequested = resolve; });

  let assigned = '';
  const reportAssignment = () => {
    const queueIds = [];
    for (const { messageQueue } of consumer.processQueueTable.values()) {
      if (messageQueue.topic === args.topic) queueIds.push(messageQueue.queueId);
    }
    queueIds.sort((a, b) => a - b);
    if (queueIds.join(',') !== assigned) {
      assigned = queueIds.join(',');
      emit('ASSIGNED', { queueIds });
    }
  };
  consumer.on(`topic_${args.topic}_queue_changed`, reportAssignment);

  consumer.subscribe(args.topic, args.expr, async msg => {
    inFlight++;
    received++;
    emit('GOT', {
      topic: msg.topic, queueId: msg.queueId, queueOffset: Number(msg.queueOffset),
      msgId: msg.msgId, tags: msg.tags || null, keys: msg.keys || null,
      body: msg.body.toString('utf8'), seq: msg.properties.seq || null,
      origin: msg.properties.origin || null, reconsumeTimes: msg.reconsumeTimes,
    });
    inFlight--;
    if (received >= expect) stopRequested('expected');
  });
  await consumer.ready();
  emit('READY');
  reportAssignment();

  let input = '';
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', chunk => {
    input += chunk;
    if (input.split('\n').some(line => line.trim() === 'STOP')) stopRequested('stdin');
  });
  process.stdin.on('end', () => stopRequested('stdin closed'));

  await stopped;
  await sleep(Number(args['linger-ms'] || 0));
  // let ali-ons take the last handled message off its process queue (and note its offset)
  while (inFlight) await sleep(10);
  await sleep(50);
  await consumer.close(); // persists the offsets (UPDATE_CONSUMER_OFFSET, oneway), unregisters
  emit('CLOSED', { received });
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const deadline = setTimeout(() => {
    emit('TIMEOUT');
    process.exit(3);
  }, Number(args['deadline-ms'] || 30000));
  const command = args._[0];
  if (command === 'produce') {
    await produce(args);
  } else if (command === 'consume') {
    await consume(args);
  } else {
    throw new Error(`unknown command ${command}`);
  }
  // ali-ons keeps timers (and its inner producer) alive after close()
  process.exit(0);
}

main().catch(err => {
  onError(err);
  process.exit(2);
});
