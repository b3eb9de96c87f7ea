//! The selector's table: every host's last report and who holds it. Pure: no
//! I/O, no clock; every method that depends on time takes `now`.
//!
//! Policy (Sprite's):
//! * a host can be given out if its last report is fresh, says idle and
//!   accepting, and nobody holds it in the requested class (one application of
//!   each class per host);
//! * longest-idle first (ties by name);
//! * fairness: when no host is free and the requester holds none of the class,
//!   one host is taken from the client holding the most, if that is more than
//!   a fair share (`max(1, usable hosts / clients wanting hosts)`);
//! * owner activity on a host, or a host that stops reporting, takes its
//!   allocations back;
//! * after a failover the holders claim their hosts again: a claimed host
//!   stays with its holder even if it is busy (with the holder's own work),
//!   unless its owner is active, it refuses foreign work or someone else
//!   holds it; a host the new selector has not heard from yet is held
//!   provisionally until its first report, and taken back if none comes
//!   within the staleness period.

use super::wire::{Class, HostRow, Report, RevokeReason};
use crate::Peer;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A client of the selector (one connection).
pub type ClientId = u64;

#[derive(Debug, Clone)]
struct Host {
    report: Report,
    at: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Grant {
    client: ClientId,
    seq: u64,
}

/// An allocation taken back; its holder must be told.
#[derive(Debug, Clone, PartialEq)]
pub struct Revocation {
    pub host: String,
    pub class: Class,
    pub client: ClientId,
    pub reason: RevokeReason,
}

/// The result of a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    pub hosts: Vec<Peer>,
    /// At most one, by fairness, given to the requester (in `hosts`).
    pub revoked: Vec<Revocation>,
}

#[derive(Debug)]
pub struct Table {
    hosts: BTreeMap<String, Host>,
    grants: BTreeMap<(String, Class), Grant>,
    clients: BTreeMap<ClientId, String>,
    /// Hosts claimed before their first report here: claim time.
    unconfirmed: BTreeMap<String, Instant>,
    /// A report older than this means the host is lost.
    stale: Duration,
    seq: u64,
}

impl Table {
    pub fn new(stale: Duration) -> Table {
        Table {
            hosts: BTreeMap::new(),
            grants: BTreeMap::new(),
            clients: BTreeMap::new(),
            unconfirmed: BTreeMap::new(),
            stale,
            seq: 0,
        }
    }

    pub fn add_client(&mut self, id: ClientId, label: &str) {
        self.clients.insert(id, label.to_string());
    }

    pub fn client_label(&self, id: ClientId) -> String {
        self.clients
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("client {id}"))
    }

    /// Forgets a client and returns every host it held.
    pub fn remove_client(&mut self, id: ClientId) -> u32 {
        self.clients.remove(&id);
        self.release(id, &[])
    }

    pub fn hosts(&self) -> usize {
        self.hosts.len()
    }

    pub fn clients(&self) -> usize {
        self.clients.len()
    }

    /// Records a report; a host whose owner became active loses its allocations,
    /// and so does a provisionally claimed host whose first report says it
    /// refuses foreign work.
    pub fn report(&mut self, r: Report, now: Instant) -> Vec<Revocation> {
        let name = r.node.clone();
        let owner = r.owner_active;
        let refuses = !r.accepts && self.unconfirmed.contains_key(&name);
        self.unconfirmed.remove(&name);
        self.hosts.insert(name.clone(), Host { report: r, at: now });
        if owner {
            self.take_back(|h| h == name, RevokeReason::OwnerActive)
        } else if refuses {
            self.take_back(|h| h == name, RevokeReason::SelectorChanged)
        } else {
            Vec::new()
        }
    }

    /// Takes back the allocations of hosts whose last report is stale, and of
    /// provisionally claimed hosts that never reported.
    pub fn expire(&mut self, now: Instant) -> Vec<Revocation> {
        let lost: Vec<String> = self
            .hosts
            .iter()
            .filter(|(_, h)| !self.fresh(h, now))
            .map(|(n, _)| n.clone())
            .collect();
        let mut r = self.take_back(|h| lost.iter().any(|l| l == h), RevokeReason::Lost);
        let silent: Vec<String> = self
            .unconfirmed
            .iter()
            .filter(|(_, at)| now.saturating_duration_since(**at) > self.stale)
            .map(|(n, _)| n.clone())
            .collect();
        for n in &silent {
            self.unconfirmed.remove(n);
        }
        r.extend(self.take_back(
            |h| silent.iter().any(|l| l == h),
            RevokeReason::SelectorChanged,
        ));
        r
    }

    fn take_back(&mut self, host: impl Fn(&str) -> bool, reason: RevokeReason) -> Vec<Revocation> {
        let keys: Vec<(String, Class)> = self
            .grants
            .keys()
            .filter(|(h, _)| host(h))
            .cloned()
            .collect();
        keys.into_iter()
            .filter_map(|k| {
                let g = self.grants.remove(&k)?;
                Some(Revocation {
                    host: k.0,
                    class: k.1,
                    client: g.client,
                    reason: reason.clone(),
                })
            })
            .collect()
    }

    fn fresh(&self, h: &Host, now: Instant) -> bool {
        now.saturating_duration_since(h.at) <= self.stale
    }

    /// Idle time at `now`, if the host is usable at all (fresh, idle, accepting).
    fn idle_for(&self, h: &Host, now: Instant) -> Option<Duration> {
        if !self.fresh(h, now) || !h.report.accepts {
            return None;
        }
        let base = Duration::from_millis(h.report.idle_for_ms?);
        Some(base + now.saturating_duration_since(h.at))
    }

    fn held(&self, client: ClientId, class: Class) -> Vec<(&String, u64)> {
        self.grants
            .iter()
            .filter(|((_, c), g)| *c == class && g.client == client)
            .map(|((h, _), g)| (h, g.seq))
            .collect()
    }

    fn grant(&mut self, host: &str, class: Class, client: ClientId) -> Peer {
        self.seq += 1;
        self.grants.insert(
            (host.to_string(), class),
            Grant {
                client,
                seq: self.seq,
            },
        );
        Peer {
            name: host.to_string(),
            addr: self
                .hosts
                .get(host)
                .map(|h| h.report.addr.clone())
                .unwrap_or_default(),
        }
    }

    /// Up to `count` hosts of `class` for `client`, none of `exclude`.
    pub fn request(
        &mut self,
        client: ClientId,
        class: Class,
        count: u32,
        exclude: &[String],
        now: Instant,
    ) -> Result<Allocation, String> {
        if count == 0 {
            return Err("asked for 0 hosts".into());
        }
        let usable: Vec<(String, Duration)> = self
            .hosts
            .iter()
            .filter(|(n, _)| !exclude.contains(n))
            .filter_map(|(n, h)| Some((n.clone(), self.idle_for(h, now)?)))
            .collect();
        let mut free: Vec<&(String, Duration)> = usable
            .iter()
            .filter(|(n, _)| !self.grants.contains_key(&(n.clone(), class)))
            .collect();
        // Longest idle first; ties by name (BTreeMap order, stable sort).
        free.sort_by_key(|b| std::cmp::Reverse(b.1));
        let chosen: Vec<String> = free
            .iter()
            .take(count as usize)
            .map(|(n, _)| n.clone())
            .collect();
        if !chosen.is_empty() {
            let hosts = chosen
                .iter()
                .map(|h| self.grant(h, class, client))
                .collect();
            return Ok(Allocation {
                hosts,
                revoked: vec![],
            });
        }
        if let Some(a) = self.reclaim(client, class, &usable) {
            return Ok(a);
        }
        Err(format!(
            "no idle host free for class {class}: {} known, {} idle{}, {} held in this class",
            self.hosts.len(),
            usable.len(),
            if exclude.is_empty() {
                String::new()
            } else {
                format!(" (not counting {})", exclude.join(", "))
            },
            usable
                .iter()
                .filter(|(n, _)| self.grants.contains_key(&(n.clone(), class)))
                .count()
        ))
    }

    /// Fairness: a requester holding none takes one host from the client holding
    /// the most, if that is above a fair share.
    fn reclaim(
        &mut self,
        client: ClientId,
        class: Class,
        usable: &[(String, Duration)],
    ) -> Option<Allocation> {
        if !self.held(client, class).is_empty() {
            return None;
        }
        let mut per: BTreeMap<ClientId, Vec<(String, u64)>> = BTreeMap::new();
        for ((h, c), g) in &self.grants {
            if *c == class && usable.iter().any(|(n, _)| n == h) {
                per.entry(g.client).or_default().push((h.clone(), g.seq));
            }
        }
        let wanting = per.len() + 1;
        let fair = (usable.len() / wanting).max(1);
        let (victim, hosts) = per.into_iter().max_by_key(|(id, v)| (v.len(), *id))?;
        if hosts.len() <= fair {
            return None;
        }
        // The most recently given host: the least work is lost.
        let (host, _) = hosts.into_iter().max_by_key(|(_, s)| *s)?;
        self.grants.remove(&(host.clone(), class));
        let to = self.client_label(client);
        let peer = self.grant(&host, class, client);
        Some(Allocation {
            hosts: vec![peer],
            revoked: vec![Revocation {
                host,
                class,
                client: victim,
                reason: RevokeReason::Fairness { to },
            }],
        })
    }

    /// After a failover: gives `client` back those of `hosts` it may keep.
    /// A known host is kept if its report is fresh, it accepts foreign work,
    /// its owner is not active and nobody else holds it in `class`; its load
    /// does not matter (it is likely busy with the claimant's own work). A
    /// host not heard from yet is held provisionally (see [`Table::report`],
    /// [`Table::expire`]).
    pub fn claim(
        &mut self,
        client: ClientId,
        class: Class,
        hosts: &[String],
        now: Instant,
    ) -> Vec<Peer> {
        let mut ok = Vec::new();
        for h in hosts {
            if self.grants.contains_key(&(h.clone(), class)) || ok.contains(h) {
                continue;
            }
            match self.hosts.get(h) {
                Some(x) => {
                    if self.fresh(x, now) && x.report.accepts && !x.report.owner_active {
                        ok.push(h.clone());
                    }
                }
                None => {
                    self.unconfirmed.entry(h.clone()).or_insert(now);
                    ok.push(h.clone());
                }
            }
        }
        ok.iter().map(|h| self.grant(h, class, client)).collect()
    }

    /// Returns `hosts` (empty: all) held by `client`; how many allocations ended.
    pub fn release(&mut self, client: ClientId, hosts: &[String]) -> u32 {
        let before = self.grants.len();
        self.grants
            .retain(|(h, _), g| g.client != client || !(hosts.is_empty() || hosts.contains(h)));
        (before - self.grants.len()) as u32
    }

    pub fn rows(&self, now: Instant) -> Vec<HostRow> {
        self.hosts
            .iter()
            .map(|(n, h)| {
                let r = &h.report;
                let state = if !self.fresh(h, now) {
                    "lost"
                } else if !r.accepts {
                    "refuses"
                } else if r.owner_active {
                    "owner"
                } else if r.idle_for_ms.is_some() {
                    "idle"
                } else {
                    "busy"
                };
                let age = now.saturating_duration_since(h.at);
                HostRow {
                    node: n.clone(),
                    addr: r.addr.clone(),
                    state: state.into(),
                    load: r.load,
                    owner_idle_ms: r.owner_idle_ms,
                    idle_for_ms: self.idle_for(h, now).map(|d| d.as_millis() as u64),
                    report_age_ms: age.as_millis() as u64,
                    held: self
                        .grants
                        .iter()
                        .filter(|((g, _), _)| g == n)
                        .map(|((_, c), g)| (*c, self.client_label(g.client)))
                        .collect(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn rep(node: &str, idle_s: Option<u64>) -> Report {
        Report {
            node: node.into(),
            addr: format!("10.0.0.{}:7070", &node[1..]),
            load: 0.1,
            owner_idle_ms: None,
            idle_for_ms: idle_s.map(|s| s * 1000),
            owner_active: false,
            accepts: true,
        }
    }

    fn table(now: Instant, idle: &[(&str, Option<u64>)]) -> Table {
        let mut t = Table::new(3 * S);
        for (n, i) in idle {
            t.report(rep(n, *i), now);
        }
        for c in 1..=3 {
            t.add_client(c, &format!("c{c}"));
        }
        t
    }

    fn names(a: &Allocation) -> Vec<&str> {
        a.hosts.iter().map(|p| p.name.as_str()).collect()
    }

    #[test]
    fn longest_idle_first_and_only_idle_hosts() {
        let t0 = Instant::now();
        let mut t = table(
            t0,
            &[
                ("n1", Some(5)),
                ("n2", None),
                ("n3", Some(50)),
                ("n4", Some(20)),
            ],
        );
        let a = t.request(1, Class::Short, 2, &[], t0).unwrap();
        assert_eq!(names(&a), ["n3", "n4"]);
        assert_eq!(a.hosts[0].addr, "10.0.0.3:7070");
        let a = t.request(2, Class::Short, 5, &[], t0).unwrap();
        assert_eq!(names(&a), ["n1"], "n2 is busy, the others are held");
        // c3 holds none and c1 holds two of the two usable hosts: fairness.
        let a = t.request(3, Class::Short, 1, &["n1".into()], t0).unwrap();
        assert_eq!((names(&a), a.revoked[0].client), (vec!["n4"], 1));
    }

    #[test]
    fn one_application_per_class_per_host() {
        let t0 = Instant::now();
        let mut t = table(t0, &[("n2", Some(5)), ("n3", Some(6))]);
        assert_eq!(
            names(&t.request(1, Class::Short, 2, &[], t0).unwrap()),
            ["n3", "n2"]
        );
        // The same client gets nothing more of the class (no reclaim from itself).
        assert!(t.request(1, Class::Short, 1, &[], t0).is_err());
        // The other class is free on both.
        assert_eq!(
            names(&t.request(2, Class::Long, 2, &[], t0).unwrap()),
            ["n3", "n2"]
        );
    }

    #[test]
    fn fairness_reclaims_from_the_client_holding_the_most() {
        let t0 = Instant::now();
        let mut t = table(t0, &[("n2", Some(5)), ("n3", Some(6)), ("n4", Some(7))]);
        assert_eq!(
            t.request(1, Class::Short, 3, &[], t0).unwrap().hosts.len(),
            3
        );
        let a = t.request(2, Class::Short, 1, &[], t0).unwrap();
        // c1 held 3 > fair share 3/2 = 1: its most recent grant (n2) goes to c2.
        assert_eq!(names(&a), ["n2"]);
        assert_eq!(
            a.revoked,
            vec![Revocation {
                host: "n2".into(),
                class: Class::Short,
                client: 1,
                reason: RevokeReason::Fairness { to: "c2".into() }
            }]
        );
        // c2 holds one now: no more reclaiming for it.
        assert!(t.request(2, Class::Short, 1, &[], t0).is_err());
        // c3 holds none; c1 holds 2 > fair share max(1, 3/3): one more reclaimed.
        let a = t.request(3, Class::Short, 1, &[], t0).unwrap();
        assert_eq!(a.revoked[0].client, 1);
        // Now 1 each: nobody above the fair share.
        t.add_client(4, "c4");
        assert!(t.request(4, Class::Short, 1, &[], t0).is_err());
    }

    #[test]
    fn no_reclaim_from_a_client_at_its_fair_share() {
        let t0 = Instant::now();
        let mut t = table(t0, &[("n2", Some(5))]);
        t.request(1, Class::Short, 1, &[], t0).unwrap();
        assert!(t.request(2, Class::Short, 1, &[], t0).is_err());
    }

    #[test]
    fn release_and_client_removal_return_hosts() {
        let t0 = Instant::now();
        let mut t = table(t0, &[("n2", Some(5)), ("n3", Some(6))]);
        t.request(1, Class::Short, 2, &[], t0).unwrap();
        t.request(1, Class::Long, 1, &[], t0).unwrap();
        assert_eq!(t.release(1, &["n3".into()]), 2);
        assert_eq!(t.release(2, &[]), 0);
        assert_eq!(
            names(&t.request(2, Class::Short, 1, &[], t0).unwrap()),
            ["n3"]
        );
        assert_eq!(t.remove_client(1), 1);
        assert_eq!(
            names(&t.request(3, Class::Short, 1, &[], t0).unwrap()),
            ["n2"]
        );
    }

    #[test]
    fn owner_activity_and_silence_take_hosts_back() {
        let t0 = Instant::now();
        let mut t = table(t0, &[("n2", Some(5)), ("n3", Some(6))]);
        t.request(1, Class::Short, 2, &[], t0).unwrap();
        let mut r = rep("n2", None);
        r.owner_active = true;
        let rv = t.report(r, t0 + S);
        assert_eq!(rv.len(), 1);
        assert_eq!(
            (rv[0].host.as_str(), &rv[0].reason),
            ("n2", &RevokeReason::OwnerActive)
        );
        assert!(t.expire(t0 + 2 * S).is_empty());
        t.report(rep("n2", Some(0)), t0 + 4 * S);
        let rv = t.expire(t0 + 4 * S + Duration::from_millis(1));
        assert_eq!(rv.len(), 1);
        assert_eq!(
            (rv[0].host.as_str(), &rv[0].reason),
            ("n3", &RevokeReason::Lost)
        );
        // Lost hosts are not given out; the fresh one is.
        let a = t.request(2, Class::Short, 2, &[], t0 + 4 * S).unwrap();
        assert_eq!(names(&a), ["n2"]);
        let rows = t.rows(t0 + 4 * S);
        assert_eq!(rows[1].state, "lost");
        assert_eq!(rows[0].held, vec![(Class::Short, "c2".to_string())]);
    }

    #[test]
    fn idle_time_grows_between_reports() {
        let t0 = Instant::now();
        let mut t = table(t0, &[("n2", Some(10))]);
        t.report(rep("n3", Some(9)), t0 + 2 * S);
        // n2 reported 10 s at t0, so it is 12 s idle at t0+2 s; n3 9 s.
        assert_eq!(
            names(&t.request(1, Class::Short, 1, &[], t0 + 2 * S).unwrap()),
            ["n2"]
        );
    }

    #[test]
    fn claim_keeps_hosts_that_are_usable_and_not_held_by_others() {
        let t0 = Instant::now();
        let mut t = table(
            t0,
            &[
                ("n2", Some(5)),
                ("n3", None),
                ("n4", Some(1)),
                ("n5", Some(1)),
            ],
        );
        let mut owner = rep("n5", Some(1));
        owner.owner_active = true;
        t.report(owner, t0);
        t.request(
            2,
            Class::Short,
            1,
            &["n2".into(), "n3".into(), "n5".into()],
            t0,
        )
        .unwrap(); // c2 holds n4
        let all: Vec<String> = ["n2", "n3", "n4", "n5"].map(String::from).to_vec();
        let got = t.claim(1, Class::Short, &all, t0);
        let got: Vec<_> = got.iter().map(|p| p.name.as_str()).collect();
        // n2 idle, n3 busy (with c1's own work): kept; n4 is c2's; n5's owner is back.
        assert_eq!(got, ["n2", "n3"]);
        // A stale host is not kept.
        let got = t.claim(1, Class::Long, &["n2".into()], t0 + 4 * S);
        assert!(got.is_empty());
    }

    #[test]
    fn a_claimed_host_not_yet_heard_from_is_held_until_its_first_report() {
        let t0 = Instant::now();
        let mut t = table(t0, &[("n2", Some(5))]);
        let all: Vec<String> = ["n3", "n4", "n5"].map(String::from).to_vec();
        let got = t.claim(1, Class::Long, &all, t0);
        assert_eq!(got.len(), 3);
        // Nobody else gets them meanwhile.
        assert_eq!(
            names(&t.request(2, Class::Long, 3, &[], t0).unwrap()),
            ["n2"]
        );
        // n3 reports busy: still c1's. n4 reports that it refuses: taken back.
        assert!(t.report(rep("n3", None), t0 + S).is_empty());
        let mut refuses = rep("n4", Some(1));
        refuses.accepts = false;
        let r = t.report(refuses, t0 + S);
        assert_eq!(
            r,
            [Revocation {
                host: "n4".into(),
                class: Class::Long,
                client: 1,
                reason: RevokeReason::SelectorChanged
            }]
        );
        // n5 never reports: taken back once the staleness period is over.
        assert!(t.expire(t0 + 2 * S).is_empty());
        let r = t.expire(t0 + 4 * S);
        assert_eq!(r.len(), 2, "{r:?}"); // n5 (silent), n2 (its report is stale)
        assert!(r
            .iter()
            .any(|x| x.host == "n5" && x.client == 1 && x.reason == RevokeReason::SelectorChanged));
        let rows = t.rows(t0 + 4 * S);
        assert!(rows.iter().any(|r| r.node == "n3" && !r.held.is_empty()));
    }
}
