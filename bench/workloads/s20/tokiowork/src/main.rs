//! A tokio program for the twentieth sweep (BENCHMARKS.md): a multi-thread
//! runtime with two workers (epoll, an eventfd waker, its timer wheel),
//! tasks that compute, sleep on timers and send over channels, and
//! `spawn_blocking` calls whose pool threads come and go while it runs.
//! Prints one line per round and a checksum that depends on every item.
//! Usage: tokiowork ROUNDS

use std::time::Duration;
use tokio::sync::mpsc;

fn mix(mut x: u64, n: u64) -> u64 {
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x = x.wrapping_add(i);
    }
    x
}

async fn worker(id: u64, items: u64, tx: mpsc::Sender<(u64, u64)>) {
    let mut x = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for k in 0..items {
        x = mix(x, 20_000);
        if k % 4 == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if k % 16 == 0 {
            // A blocking-pool thread, kept 50 ms after its last job.
            x = tokio::task::spawn_blocking(move || mix(x, 50_000))
                .await
                .unwrap();
        }
        tx.send((id, x)).await.unwrap();
    }
}

fn main() {
    let rounds: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(40);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_keep_alive(Duration::from_millis(50))
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut total = 0u64;
        for r in 0..rounds {
            let (tx, mut rx) = mpsc::channel(8);
            for id in 0..6 {
                tokio::spawn(worker(r * 100 + id, 64, tx.clone()));
            }
            drop(tx);
            let mut sum = 0u64;
            let mut n = 0;
            while let Some((id, x)) = rx.recv().await {
                sum = sum.wrapping_add(x.rotate_left((id % 64) as u32));
                n += 1;
            }
            total = total.rotate_left(5) ^ sum;
            println!("round {r}: {n} items, {sum:016x}");
        }
        println!("total {total:016x}");
    });
}
