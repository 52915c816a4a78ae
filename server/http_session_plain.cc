// Session<PlainStream>: a connection over plain HTTP. The code is
// http_session.h's; this file only instantiates it (see there why apart).
#include "server/http_session.h"

namespace corvid::server::session_detail {

void StartPlainSession(HttpServer::Impl& server, tcp::socket&& socket) {
  std::make_shared<Session<PlainStream>>(server, std::move(socket))->Start();
}

}  // namespace corvid::server::session_detail
