//! ureq, an HTTP client written for `std::net`, on fibers.

use std::io::Read;

use crate::support::{on_fibers, overlapped, slow_server, DELAY, FIBERS};

#[test]
fn ureq_gets_from_a_slow_server_overlap_while_a_ticker_runs() {
    let url = format!("http://{}/", slow_server(DELAY));
    let (elapsed, ticked) = on_fibers(move || {
        let mut response = ureq::get(&url).call().unwrap();
        let mut body = String::new();
        response.body_mut().as_reader().read_to_string(&mut body).unwrap();
        assert_eq!(body, "ok");
    });
    assert!(overlapped(elapsed), "{FIBERS} GETs of a {DELAY:?} server took {elapsed:?}");
    assert!(ticked, "the ticker fiber ran while every GET was parked");
}
