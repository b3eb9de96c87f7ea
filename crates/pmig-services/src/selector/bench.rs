//! `pmig bench selector`: request + return pairs against a selector over the
//! real authenticated channel, from one and from several clients at once.
//!
//! Default: an in-process selector (the daemon's own code, [`Selector::serve`])
//! on a loopback TCP port with a fresh cluster key and `hosts` idle hosts;
//! each client is a [`Client::direct`] connection on its own thread. With
//! `local`, the clients go through this node's daemon instead
//! ([`Client::local`]: control socket → daemon → selector), which is what
//! `pmig run --idle` and pmake do.

use super::wire::{Class, Report};
use super::{Client, Selector, SelectorError};
use pmig_proto::blocking::Channel;
use pmig_proto::{ClusterKey, Config, Msg};
use std::net::TcpListener;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Options {
    /// Idle hosts in the in-process selector's table.
    pub hosts: usize,
    /// Client counts to measure, one row each.
    pub clients: Vec<usize>,
    /// How long each row runs.
    pub duration: Duration,
    /// Through this node's daemon instead of an in-process selector.
    pub local: bool,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub path: String,
    pub clients: usize,
    pub pairs: u64,
    pub denied: u64,
    pub secs: f64,
    /// Requests + returns per second (each pair is two).
    pub ops_per_s: f64,
    pub pairs_per_s: f64,
    pub request_p50_us: f64,
    pub request_p99_us: f64,
    pub pair_p50_us: f64,
    pub pair_p99_us: f64,
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Starts an in-process selector on a loopback port; returns its address.
fn start_selector(key: &ClusterKey, hosts: usize) -> Result<String, SelectorError> {
    let sel = Selector::standalone(key.clone());
    for i in 0..hosts {
        sel.inject(Report {
            node: format!("h{i}"),
            addr: format!("127.0.0.1:{}", 20000 + i),
            load: 0.0,
            owner_idle_ms: None,
            idle_for_ms: Some(1000 * (hosts - i) as u64),
            owner_active: false,
            accepts: true,
        });
    }
    let l = TcpListener::bind("127.0.0.1:0").map_err(|source| SelectorError::Io {
        what: "bind a loopback port".into(),
        source,
    })?;
    let addr = l
        .local_addr()
        .map_err(|source| SelectorError::Io {
            what: "loopback address".into(),
            source,
        })?
        .to_string();
    let key = key.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let (sel, key) = (sel.clone(), key.clone());
            let _ = s.set_nodelay(true);
            std::thread::spawn(move || {
                let Ok(mut ch) = Channel::server(s, &key, &Config::new("bench")) else {
                    return;
                };
                if let Ok((Msg::Service { .. }, body, att)) = ch.recv_with().map(|i| i.into_parts())
                {
                    sel.serve(ch, &body[att..]);
                }
            });
        }
    });
    Ok(addr)
}

/// One client's loop: request one short host, return it, until `until`.
fn client_loop(mut c: Client, until: Instant) -> Result<(Vec<f64>, Vec<f64>, u64), SelectorError> {
    let (mut req, mut pair, mut denied) = (Vec::new(), Vec::new(), 0u64);
    while Instant::now() < until {
        let t0 = Instant::now();
        match c.request_excluding(Class::Short, 1, &[]) {
            Ok(h) => {
                let t1 = Instant::now();
                let names: Vec<String> = h.into_iter().map(|p| p.name).collect();
                c.release(&names)?;
                let t2 = Instant::now();
                req.push((t1 - t0).as_secs_f64() * 1e6);
                pair.push((t2 - t0).as_secs_f64() * 1e6);
            }
            Err(SelectorError::Denied(_)) => denied += 1,
            Err(e) => return Err(e),
        }
    }
    Ok((req, pair, denied))
}

pub fn run(o: &Options, progress: &dyn Fn(&str)) -> Result<Vec<Row>, SelectorError> {
    let key = ClusterKey::generate().map_err(|e| SelectorError::Invalid(e.to_string()))?;
    let addr = if o.local {
        None
    } else {
        Some(start_selector(&key, o.hosts)?)
    };
    let mut rows = Vec::new();
    for &n in &o.clients {
        progress(&format!("{n} client(s)"));
        let mut clients = Vec::new();
        for i in 0..n {
            clients.push(match &addr {
                Some(a) => Client::direct(a, &key, "bench-client", &format!("bench{i}"))?,
                None => Client::local()?,
            });
        }
        let t0 = Instant::now();
        let until = t0 + o.duration;
        let handles: Vec<_> = clients
            .into_iter()
            .map(|c| std::thread::spawn(move || client_loop(c, until)))
            .collect();
        let (mut req, mut pair, mut denied) = (Vec::new(), Vec::new(), 0);
        for h in handles {
            let (r, p, d) = h
                .join()
                .map_err(|_| SelectorError::Invalid("a bench client panicked".into()))??;
            req.extend(r);
            pair.extend(p);
            denied += d;
        }
        let secs = t0.elapsed().as_secs_f64();
        let pairs = pair.len() as u64;
        rows.push(Row {
            path: if o.local {
                "control socket → daemon → selector".into()
            } else {
                "direct (Noise over loopback TCP)".into()
            },
            clients: n,
            pairs,
            denied,
            secs,
            ops_per_s: 2.0 * pairs as f64 / secs,
            pairs_per_s: pairs as f64 / secs,
            request_p50_us: pct(&mut req, 0.5),
            request_p99_us: pct(&mut req, 0.99),
            pair_p50_us: pct(&mut pair, 0.5),
            pair_p99_us: pct(&mut pair, 0.99),
        });
    }
    Ok(rows)
}

pub fn markdown(rows: &[Row]) -> String {
    let mut s = String::from(
        "| path | clients | pairs | denied | requests+returns/s | pairs/s | request p50 µs | request p99 µs | pair p50 µs | pair p99 µs |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |\n",
            r.path,
            r.clients,
            r.pairs,
            r.denied,
            r.ops_per_s,
            r.pairs_per_s,
            r.request_p50_us,
            r.request_p99_us,
            r.pair_p50_us,
            r.pair_p99_us
        ));
    }
    s
}
