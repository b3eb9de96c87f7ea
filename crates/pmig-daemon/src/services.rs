//! Dispatch of `Msg::Service` connections to the cluster services
//! (`pmig-services`). The first `Service` message on a connection picks the
//! service; the connection then belongs to it.

use crate::Node;
use pmig_proto::blocking::Channel;
use pmig_proto::{code, service, Msg};
use pmig_services::exec::{Exec, ExecHost};
use pmig_services::Peer;
use std::net::TcpStream;
use std::process::{Child, Command};

impl ExecHost for Node {
    fn node(&self) -> &str {
        &self.cfg.node
    }
    fn peers(&self) -> &[Peer] {
        &self.cfg.peers
    }
    fn cluster_key(&self) -> &pmig_proto::ClusterKey {
        &self.key
    }
    fn spawn_owned(&self, cmd: &mut Command) -> std::io::Result<Child> {
        pmig_strategies::Host::spawn(self, cmd)
    }
    fn release(&self, pid: i32) {
        self.helpers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&pid);
    }
    fn selector(&self) -> Option<Peer> {
        self.selector.current()
    }
    fn own(&self, pid: i32) {
        self.helpers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(pid);
    }
    fn exec(&self) -> &Exec {
        &self.exec
    }
}

/// Serves one connection whose first message was `Service { service }` with
/// attachment `body`.
pub(crate) fn serve(node: &Node, mut ch: Channel<TcpStream>, svc: u16, body: &[u8]) {
    if svc == service::SELECTOR {
        return node.selector.serve(ch, body);
    }
    let peer = ch.peer().node.clone();
    if svc == service::EXEC {
        return pmig_services::exec::remote::serve(node, ch, body);
    }
    if svc == service::BALANCE {
        return serve_balance(node, ch, body);
    }
    let name = "unknown";
    tracing::warn!("{peer} asked for service {svc} ({name}), which this daemon does not offer");
    let _ = ch.send(&Msg::Error {
        code: code::REFUSED,
        text: format!("service {svc} ({name}) is not offered by this daemon"),
    });
}

/// One connection of the balance service (3): `Evict` or `Status`.
fn serve_balance(node: &Node, mut ch: Channel<TcpStream>, body: &[u8]) {
    use pmig_services::balance::{self, BalMsg, VERSION};
    let peer = ch.peer().node.clone();
    let answer = match BalMsg::decode(body) {
        Ok(BalMsg::Evict { version, by }) if version == VERSION => {
            // Evictions take as long as their migrations; answer when done.
            let _ = ch
                .stream()
                .set_write_timeout(Some(std::time::Duration::from_secs(10)));
            match node.evict_node(None, &format!("{by} (via {peer})")) {
                Ok(r) => BalMsg::Evicted(r),
                Err(text) => BalMsg::Refused { text },
            }
        }
        Ok(BalMsg::Status { version }) if version == VERSION => {
            BalMsg::Decisions(node.own_decisions())
        }
        Ok(BalMsg::Evict { version, .. } | BalMsg::Status { version }) => BalMsg::Refused {
            text: format!(
                "{} speaks balance service version {VERSION}, {peer} sent version {version}",
                node.cfg.node
            ),
        },
        Ok(other) => BalMsg::Refused {
            text: format!("unexpected first balance message {other:?}"),
        },
        Err(e) => BalMsg::Refused {
            text: e.to_string(),
        },
    };
    if let BalMsg::Refused { text } = &answer {
        tracing::warn!("balance request from {peer} refused: {text}");
    }
    let (tx, _) = ch.halves();
    let _ = balance::send(tx, &answer);
}
