//! HTTP/2 end to end from fibers: the `h2` crate's client against its server,
//! each in `block_on` over loopback TCP through `AsyncIo`.

use std::time::Duration;

use bytes::Bytes;
use h2::RecvStream;
use neverblock::block_on;
use neverblock::bridge::AsyncIo;
use neverblock::net::{TcpListener, TcpStream};

/// A body of `len` bytes that no shorter period repeats.
fn body(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 253) as u8 ^ seed ^ (i >> 10) as u8).collect()
}

/// Reads a whole body, handing the flow-control window back as it goes.
async fn read_all(mut stream: RecvStream) -> Result<Vec<u8>, h2::Error> {
    let mut all = Vec::new();
    while let Some(chunk) = stream.data().await {
        let chunk = chunk?;
        all.extend_from_slice(&chunk);
        stream.flow_control().release_capacity(chunk.len())?;
    }
    Ok(all)
}

/// Serves every request on `conn` in a fiber of its own: the body back, reversed.
fn serve(conn: TcpStream) {
    let mut h2 = block_on(h2::server::handshake(AsyncIo::new(conn))).unwrap().unwrap();
    let mut handlers = Vec::new();
    // Accepting drives the connection; each stream is answered on its own fiber.
    while let Some(request) = block_on(h2.accept()).unwrap() {
        let (request, mut respond) = request.unwrap();
        handlers.push(neverblock::spawn(move || {
            let mut got = block_on(read_all(request.into_body())).unwrap().unwrap();
            got.reverse();
            let response = http::Response::builder().status(200).body(()).unwrap();
            let mut send = respond.send_response(response, false).unwrap();
            send.send_data(Bytes::from(got), true).unwrap();
        }));
    }
    for handler in handlers {
        handler.join().unwrap();
    }
}

#[test]
fn h2_client_and_server_exchange_bodies_in_fibers_over_loopback() {
    const LEN: usize = 384 << 10;
    let exchange = neverblock::run(|| {
        neverblock::timeout(Duration::from_secs(30), || {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let server = neverblock::spawn(move || serve(listener.accept().unwrap().0));

            let io = AsyncIo::new(TcpStream::connect(addr).unwrap());
            let (client, connection) = block_on(h2::client::handshake(io)).unwrap().unwrap();
            // The connection is driven by a fiber of its own, as a task would be.
            let driver = neverblock::spawn(move || block_on(connection).unwrap());

            let sent = body(LEN, 0x5a);
            let received = block_on(async {
                let mut client = client.ready().await?;
                let request = http::Request::post("http://localhost/echo").body(()).unwrap();
                let (response, mut upload) = client.send_request(request, false)?;
                upload.send_data(Bytes::from(sent.clone()), true)?;
                let response = response.await?;
                assert_eq!(response.status(), 200);
                let received = read_all(response.into_body()).await?;
                drop(client);
                Ok::<_, h2::Error>(received)
            })
            .unwrap()
            .unwrap();
            driver.join().unwrap().unwrap();
            server.join().unwrap();
            (sent, received)
        })
    });
    let (mut sent, received) = exchange.expect("the exchange finished in time");
    sent.reverse();
    assert_eq!(received.len(), LEN);
    assert!(received == sent, "the response body is the request's, reversed, byte for byte");
}
