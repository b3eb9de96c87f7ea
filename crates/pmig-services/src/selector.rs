//! Host selection: Sprite's central migration server, with failover (issue 5).
