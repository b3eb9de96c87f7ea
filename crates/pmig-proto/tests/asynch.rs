//! The tokio API: same wire format as the blocking one (they interoperate).
#![cfg(feature = "tokio")]

use pmig_proto::{asynch, blocking, ClusterKey, Config, Msg, ProtoError};

fn key(b: u8) -> ClusterKey {
    ClusterKey::from_bytes([b; 32])
}

#[tokio::test]
async fn async_pair_and_interop_with_blocking() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let srv = tokio::spawn(async move {
        // First an async client, then a blocking one, then a client with a wrong key.
        let mut out = Vec::new();
        for _ in 0..3 {
            let r = asynch::accept(&l, &key(1), &Config::new("srv")).await;
            if let Ok(mut ch) = r {
                let inc = ch.recv_with().await.unwrap();
                let len = inc.attachment().len() as u64;
                ch.send(&Msg::Pong { seq: len }).await.unwrap();
                out.push(Ok(ch.peer().node.clone()));
            } else {
                out.push(r.map(|_| String::new()));
            }
        }
        out
    });

    let mut c = asynch::connect(addr, &key(1), &Config::new("a1"))
        .await
        .unwrap();
    let bulk = vec![7u8; 3 << 20];
    c.send_with(&Msg::Ping { seq: 1 }, &[&bulk]).await.unwrap();
    assert_eq!(c.recv().await.unwrap(), Msg::Pong { seq: 3 << 20 });

    let b = tokio::task::spawn_blocking(move || {
        let mut c = blocking::connect(addr, &key(1), &Config::new("b1")).unwrap();
        c.send_with(&Msg::Ping { seq: 2 }, &[b"xyz"]).unwrap();
        assert_eq!(c.recv().unwrap(), Msg::Pong { seq: 3 });
        blocking::connect(addr, &key(2), &Config::new("bad")).err()
    })
    .await
    .unwrap();
    let bad = b.expect("wrong key must fail");
    assert!(matches!(bad, ProtoError::Handshake { .. }), "{bad}");

    let res = srv.await.unwrap();
    assert_eq!(res[0].as_ref().unwrap(), "a1");
    assert_eq!(res[1].as_ref().unwrap(), "b1");
    assert!(
        matches!(res[2], Err(ProtoError::AuthFailed { .. })),
        "{:?}",
        res[2]
    );
}
