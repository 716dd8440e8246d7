//! The conformance suite (`foreman/src/backend/conformance.rs`, issue 53)
//! on this host's engine, `backend: docker`. Its daemon is a private
//! dockerd of the test's own (its own socket, data and exec roots, the
//! test image loaded into it), so that the dead-daemon case may stop and
//! restart it without disturbing anything else on the machine.

use crate::conformance::{Cli, Infra, suite};
use crate::daemon::PrivateDockerd;
use crate::util::{Saheeli, require_docker};

#[test]
fn the_local_engine_passes_the_conformance_suite() {
    require_docker();
    let t0 = std::time::Instant::now();
    let dockerd = PrivateDockerd::start();
    dockerd.load_image();
    let s = Saheeli::with_config("lease: 2s\n").env("DOCKER_HOST", &dockerd.socket());
    let mut bench = Cli::new(s, "docker", Infra::Local(dockerd));
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(suite::all(&mut bench));
    eprintln!(
        "the local engine passed in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
}
