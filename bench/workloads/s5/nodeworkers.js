// node worker_threads: 4 workers computing in rounds, results combined by the main thread.
const { Worker, isMainThread, parentPort, workerData } = require('worker_threads');
if (isMainThread) {
  const rounds = parseInt(process.argv[2] || '20');
  let r = 0;
  const ws = [0, 1, 2, 3].map(i => new Worker(__filename, { workerData: i }));
  const step = () => {
    if (r === rounds) { ws.forEach(w => w.terminate()); return; }
    Promise.all(ws.map(w => new Promise(res => { w.once('message', res); w.postMessage(r); }))).then(vals => {
      console.log('round', r, vals.join(' ')); r++; step();
    });
  };
  step();
} else {
  let x = 1n + BigInt(workerData);
  parentPort.on('message', r => {
    let s = 0;
    for (let i = 0; i < 2000000; i++) { s = (s * 31 + ((i * (workerData + 3) + r) % 1009)) % 1000003; }
    const m = new Map(); for (let i = 0; i < 50000; i++) m.set('k' + (i % 5000), i * r);
    parentPort.postMessage(s + ':' + m.size);
  });
}
