#include "cluster/errc.hpp"

#include <string>

namespace switchyard::cluster {
namespace {

class category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "switchyard.cluster"; }
  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::unreachable:
        return "cluster engine unreachable";
      case errc::timeout:
        return "cluster engine did not answer in time";
      case errc::bad_response:
        return "unexpected answer from the cluster engine";
      case errc::lease_not_found:
        return "etcd lease expired or revoked";
      case errc::compacted:
        return "etcd revision compacted";
      case errc::compare_failed:
        return "etcd transaction compare failed";
      case errc::queue_full:
        return "cluster queue full";
      case errc::payload_too_large:
        return "message larger than the NATS server's max_payload";
      case errc::closed:
        return "cluster engine connection closed";
      case errc::invalid_argument:
        return "invalid argument";
    }
    return "cluster error " + std::to_string(value);
  }
};

}  // namespace

const std::error_category& cluster_category() noexcept {
  static const category instance;
  return instance;
}

}  // namespace switchyard::cluster
