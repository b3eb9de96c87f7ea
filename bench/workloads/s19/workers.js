// Node's worker_threads: two workers (each its own V8 isolate and event
// loop on a thread of its own) take numbered jobs from the main thread
// over MessagePorts, hash them with node:crypto and answer; a
// SharedArrayBuffer counts the jobs done with Atomics. The main thread
// prints one digest of every answer, in job order, at the end, so the
// output depends only on JOBS.
// Usage: node workers.js JOBS
'use strict';
const { Worker, isMainThread, parentPort, workerData } = require('node:worker_threads');
const crypto = require('node:crypto');

if (isMainThread) {
  const jobs = Number(process.argv[2] || 20000);
  const shared = new SharedArrayBuffer(8);
  const done = new Int32Array(shared);
  const answers = new Array(jobs);
  let next = 0;
  let finished = 0;
  const workers = [0, 1].map((id) => new Worker(__filename, { workerData: { id, shared } }));
  const feed = (w) => {
    if (next < jobs) w.postMessage(next++);
  };
  for (const w of workers) {
    w.on('message', ([n, hex]) => {
      answers[n] = hex;
      finished++;
      if (finished === jobs) {
        const all = crypto.createHash('sha256');
        for (const a of answers) all.update(a);
        console.log(`${jobs} jobs, ${Atomics.load(done, 0)} counted, ${all.digest('hex')}`);
        for (const x of workers) x.terminate();
      } else {
        feed(w);
      }
    });
    for (let i = 0; i < 4; i++) feed(w);
  }
} else {
  const done = new Int32Array(workerData.shared);
  parentPort.on('message', (n) => {
    let h = crypto.createHash('sha256').update(String(n));
    for (let i = 0; i < 200; i++) h = crypto.createHash('sha256').update(h.digest());
    const buf = Buffer.alloc(4096, n & 0xff);
    const hex = crypto.createHash('md5').update(buf).update(h.digest()).digest('hex');
    Atomics.add(done, 0, 1);
    parentPort.postMessage([n, hex]);
  });
}
