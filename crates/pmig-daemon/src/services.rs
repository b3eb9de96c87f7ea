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
    let name = match svc {
        service::SELECTOR => "host selection",
        service::BALANCE => "load balancing",
        _ => "unknown",
    };
    tracing::warn!("{peer} asked for service {svc} ({name}), which this daemon does not offer");
    let _ = ch.send(&Msg::Error {
        code: code::REFUSED,
        text: format!("service {svc} ({name}) is not offered by this daemon"),
    });
}
