//! Raw TCP throughput between two nodes: the limit every migration's transfer
//! rate is compared with. `pmig bench tcp-server` runs in one node, `pmig bench
//! tcp-client` in another; the client sends for a fixed time, half-closes, and
//! the server answers with the byte count once it has read everything, so the
//! measured time covers the bytes actually delivered.

use crate::{BenchError, Result};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// What the client measured.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct TcpResult {
    pub bytes: u64,
    pub secs: f64,
    /// Bytes per second delivered to the server.
    pub bytes_per_s: f64,
}

/// Accepts `conns` connections one after another; for each, reads until EOF and
/// answers with the number of bytes read (8 bytes, little endian). Prints
/// `LISTENING <addr>` on stdout once it accepts.
pub fn serve(listen: SocketAddr, conns: usize) -> Result<()> {
    let l = TcpListener::bind(listen).map_err(|e| BenchError::Io(format!("bind {listen}"), e))?;
    serve_on(l, conns)
}

/// [`serve`] on a listener that is already bound.
pub fn serve_on(l: TcpListener, conns: usize) -> Result<()> {
    let addr = l
        .local_addr()
        .map_err(|e| BenchError::Io("local_addr".into(), e))?;
    println!("LISTENING {addr}");
    let _ = std::io::stdout().flush();
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..conns {
        let (mut s, _) = l.accept().map_err(|e| BenchError::Io("accept".into(), e))?;
        let mut n = 0u64;
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(k) => n += k as u64,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(BenchError::Io("read".into(), e)),
            }
        }
        s.write_all(&n.to_le_bytes())
            .map_err(|e| BenchError::Io("answer".into(), e))?;
    }
    Ok(())
}

/// Sends incompressible data to `to` for `duration`, then waits for the
/// server's count.
pub fn send(to: SocketAddr, duration: Duration) -> Result<TcpResult> {
    let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(10))
        .map_err(|e| BenchError::Io(format!("connect {to}"), e))?;
    let mut block = vec![0u8; 256 << 10];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for c in block.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes());
    }
    let t = Instant::now();
    let mut sent = 0u64;
    while t.elapsed() < duration {
        s.write_all(&block)
            .map_err(|e| BenchError::Io("send".into(), e))?;
        sent += block.len() as u64;
    }
    s.shutdown(Shutdown::Write)
        .map_err(|e| BenchError::Io("shutdown".into(), e))?;
    let mut ans = [0u8; 8];
    s.read_exact(&mut ans)
        .map_err(|e| BenchError::Io("reading the server's count".into(), e))?;
    let secs = t.elapsed().as_secs_f64();
    let bytes = u64::from_le_bytes(ans);
    if bytes != sent {
        return Err(BenchError::Failed(format!(
            "tcp: sent {sent} bytes, the server read {bytes}"
        )));
    }
    Ok(TcpResult {
        bytes,
        secs,
        bytes_per_s: bytes as f64 / secs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_counts_every_byte() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let srv = std::thread::spawn(move || serve_on(l, 1));
        let r = send(addr, Duration::from_millis(50)).expect("connected");
        srv.join().unwrap().unwrap();
        assert!(r.bytes > 0 && r.bytes & ((256 << 10) - 1) == 0);
        assert!(r.bytes_per_s > 0.0);
    }
}
