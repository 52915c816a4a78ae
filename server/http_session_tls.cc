// Session<TlsStream>: a connection over HTTPS (Asio's OpenSSL stream). The code is
// http_session.h's; this file only instantiates it (see there why apart).
#include "server/http_session.h"

namespace corvid::server::session_detail {

void StartTlsSession(HttpServer::Impl& server, tcp::socket&& socket, asio::ssl::context& tls) {
  std::make_shared<Session<TlsStream>>(server, std::move(socket), tls)->Start();
}

}  // namespace corvid::server::session_detail
