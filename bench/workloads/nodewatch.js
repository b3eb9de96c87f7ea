// fs.watch (libuv: inotify under epoll) on a directory of its own: 1500
// files created and removed one at a time, each event awaited before the
// next step; prints the counts and a digest of the names.
const fs = require('fs'), path = require('path'), crypto = require('crypto');
const dir = fs.mkdtempSync('./nodewatch.');
const h = crypto.createHash('sha256');
let waiting = null, seen = 0;
const w = fs.watch(dir, (type, name) => {
  if (type !== 'rename' || !waiting || name !== waiting.name) throw new Error(`unexpected ${type} ${name}`);
  seen++; h.update(name); const r = waiting.resolve; waiting = null; r();
});
const next = (name) => new Promise((resolve) => { waiting = { name, resolve }; });
(async () => {
  for (let i = 0; i < 1500; i++) {
    const name = `f${i}`, p = path.join(dir, name);
    let ev = next(name); fs.writeFileSync(p, ''); await ev;
    ev = next(name); fs.unlinkSync(p); await ev;
    await new Promise((r) => setTimeout(r, 2));
  }
  w.close(); fs.rmdirSync(dir);
  console.log('events', seen, h.digest('hex').slice(0, 16));
})();
