// Names of ZooKeeper result codes and operations, for messages and metric
// labels (declared in zk_session.h; no zookeeper.h needed).
#include "server/zk/zk_session.h"

namespace turnstile {

const char* ZkCodeName(ZkCode code) {
  switch (code) {
    case ZkCode::kOk: return "OK";
    case ZkCode::kNoNode: return "NO_NODE";
    case ZkCode::kNodeExists: return "NODE_EXISTS";
    case ZkCode::kBadVersion: return "BAD_VERSION";
    case ZkCode::kNotEmpty: return "NOT_EMPTY";
    case ZkCode::kConnectionLoss: return "CONNECTION_LOSS";
    case ZkCode::kSessionExpired: return "SESSION_EXPIRED";
    case ZkCode::kClosing: return "CLOSING";
    case ZkCode::kNoAuth: return "NO_AUTH";
    case ZkCode::kOther: return "OTHER";
  }
  return "?";
}

const char* ZkOpName(ZkOp op) {
  switch (op) {
    case ZkOp::kCreate: return "create";
    case ZkOp::kDelete: return "delete";
    case ZkOp::kGetData: return "get_data";
    case ZkOp::kSetData: return "set_data";
    case ZkOp::kGetChildren: return "get_children";
    case ZkOp::kExists: return "exists";
    case ZkOp::kMulti: return "multi";
    case ZkOp::kSync: return "sync";
    case ZkOp::kCount: break;
  }
  return "?";
}

}  // namespace turnstile
