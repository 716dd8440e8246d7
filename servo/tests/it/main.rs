//! The `servo` binary outside a container: a temporary workspace, a task,
//! and a replay script or a fake gateway that speaks the real wire format.
//! Each module is one feature; `util` holds the builder and the fake.

mod gateway;
mod replay;
mod signals;
mod stalls;
mod util;
