//! Dispatch of `Msg::Service` connections to the cluster services
//! (`pmig-services`). The first `Service` message on a connection picks the
//! service; the connection then belongs to it.

use crate::Node;
use pmig_proto::blocking::Channel;
use pmig_proto::{code, service, Msg};
use std::net::TcpStream;

/// Serves one connection whose first message was `Service { service }` with
/// attachment `body`.
pub(crate) fn serve(node: &Node, mut ch: Channel<TcpStream>, svc: u16, body: &[u8]) {
    if svc == service::SELECTOR {
        return node.selector.serve(ch, body);
    }
    let peer = ch.peer().node.clone();
    let name = match svc {
        service::EXEC => "remote execution",
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
