"""Which certificate does a TLS server present? (test helper, loopback only)"""

from __future__ import annotations

import socket
import ssl
import threading

from cryptography import x509

WEBHOOK_HOST = "node-ipam-lb-webhook.node-ipam-lb.svc"


def presented_certificate(
    *, port: int, ca_pem: bytes, host: str = WEBHOOK_HOST
) -> x509.Certificate:
    """Handshake with ``127.0.0.1:port`` as the API server would (verifying ``host`` against
    ``ca_pem``) and return the leaf certificate. Raises ssl.SSLError when it does not verify."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


class OneShotServer:
    """Accept TLS connections on 127.0.0.1 with a server ``ssl.SSLContext`` (in a thread)."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                with self.context.wrap_socket(conn, server_side=True):
                    pass
            except (OSError, ssl.SSLError):
                conn.close()

    def close(self) -> None:
        self.sock.close()
        self._thread.join(5)
