#include "server/http_error.h"

#include "tessera/core/error.h"
#include "tessera/serving/chat.h"
#include "tessera/serving/serving.h"

namespace tessera::server {

std::string HttpError::type() const {
  switch (status_) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 503: return "unavailable_error";
    default: return status_ >= 500 ? "server_error" : "invalid_request_error";
  }
}

nlohmann::json HttpError::to_json() const {
  return {{"error", {{"code", status_}, {"message", what()}, {"type", type()}}}};
}

HttpError to_http_error(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const HttpError& e) {
    return e;
  } catch (const serving::ChatError& e) {
    return HttpError(400, e.what());
  } catch (const serving::Stopped& e) {
    return HttpError(503, e.what());
  } catch (const Error& e) {
    switch (e.category()) {
      case ErrorCategory::kInvalidArgument: return HttpError(400, e.what());
      default: return HttpError(500, e.what());
    }
  } catch (const nlohmann::json::exception& e) {
    return HttpError(400, fmt::format("bad request: {}", e.what()));
  } catch (const std::exception& e) {
    return HttpError(500, e.what());
  } catch (...) {
    return HttpError(500, "internal error");
  }
}

}  // namespace tessera::server
