//! `ping`: whether the daemon answers (`supervisorctl` asks it before anything else, the
//! MCP server at its start).

use super::Read;
use crate::protocol::views::Pong;
use crate::protocol::Response;

pub fn read() -> Read {
    Read::Store(Box::new(|_, _| Response::answer(&Pong { pong: true })))
}
