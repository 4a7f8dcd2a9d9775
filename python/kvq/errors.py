"""The exceptions of the kvq package: one class per kvq error code, all under KvqError.

Codes that FoundationDB also has keep FoundationDB's number and name (``NotCommittedError`` is
1020, ``not_committed``); kvq's own conditions use the 9000 band. This file follows the list in
include/kvq/error.h (a test checks every entry against the library's kvq_errname).
"""

from __future__ import annotations

from typing import Dict, Optional, Type

__all__ = [
    "KvqError",
    "ClosedError",
    "ForkedError",
    "LibraryNotFoundError",
    "error_class",
    "TimedOutError",
    "TransactionTooOldError",
    "FutureVersionError",
    "NotCommittedError",
    "CommitUnknownResultError",
    "TransactionCancelledError",
    "WatchCancelledError",
    "TransactionTimedOutError",
    "TooManyWatchesError",
    "WatchesDisabledError",
    "AccessedUnreadableError",
    "ProcessBehindError",
    "DatabaseLockedError",
    "ClusterVersionChangedError",
    "OperationCancelledError",
    "CommitProxyMemoryLimitExceededError",
    "BatchTransactionThrottledError",
    "GrvProxyMemoryLimitExceededError",
    "TagThrottledError",
    "ProxyTagThrottledError",
    "TransactionThrottledHotShardError",
    "TransactionRejectedRangeLockedError",
    "ClientInvalidOperationError",
    "KeyOutsideLegalRangeError",
    "InvertedRangeError",
    "InvalidOptionValueError",
    "InvalidOptionError",
    "NetworkNotSetupError",
    "NetworkAlreadySetupError",
    "ReadVersionAlreadySetError",
    "VersionInvalidError",
    "UsedDuringCommitError",
    "InvalidMutationTypeError",
    "NoCommitVersionError",
    "TransactionTooLargeError",
    "KeyTooLargeError",
    "ValueTooLargeError",
    "ConnectionStringInvalidError",
    "UnsupportedOperationError",
    "SpecialKeysNoModuleFoundError",
    "SpecialKeysWriteDisabledError",
    "TenantsDisabledError",
    "UnknownTenantError",
    "ApiVersionUnsetError",
    "ApiVersionAlreadySetError",
    "ApiVersionInvalidError",
    "ApiVersionNotSupportedError",
    "UnknownError",
    "InternalError",
    "InvalidArgumentError",
    "OutOfMemoryError",
    "NotFoundError",
    "DatabaseDamagedError",
    "IoError",
    "EngineUnavailableError",
    "UserError",
    "BufferTooSmallError",
    "InvalidTupleError",
    "OutOfRangeError",
    "AlreadyExistsError",
    "WrongTypeError",
    "DiskFullError",
    "PermissionDeniedError",
    "BusyError",
    "UnsupportedError",
    "LeaseExpiredError",
    "LeaseSettledError",
]


class KvqError(Exception):
    """Base class of every error the kvq package raises.

    Attributes:
        code: kvq's error code (FoundationDB's number where FoundationDB has the error), or
            None for a condition of the Python package itself (a missing library).
        name: the code's short name, as kvq_errname gives it ("not_committed").
        message: the code's one-line description (kvq_strerror).
        detail: what the failing call recorded (kvq_last_error): which argument, which file.
    """

    code: Optional[int] = None
    name: str = "error"

    def __init__(self, message: str = "", detail: str = "", code: Optional[int] = None) -> None:
        if code is not None:
            self.code = code
        self.message = message
        self.detail = detail
        text = message
        if detail and detail != message:
            text = f"{message}: {detail}" if message else detail
        if self.code is not None:
            text = f"{text} ({self.name}, {self.code})"
        super().__init__(text)

    @property
    def retryable(self) -> bool:
        """True when a transaction failing with this error may be retried (kvq_error_retryable)."""
        return self.code in _RETRYABLE

    @property
    def maybe_committed(self) -> bool:
        """True when the transaction may have committed (1021, 1039)."""
        return self.code in (1021, 1039)


_RETRYABLE = frozenset(
    (1007, 1009, 1020, 1021, 1037, 1038, 1039, 1042, 1051, 1078, 1213, 1223, 1235, 1242, 2137)
)


class TimedOutError(KvqError, TimeoutError):
    """1004 timed_out: operation timed out."""

    code = 1004
    name = "timed_out"


class TransactionTooOldError(KvqError):
    """1007 transaction_too_old: transaction is too old to perform reads or be committed."""

    code = 1007
    name = "transaction_too_old"


class FutureVersionError(KvqError):
    """1009 future_version: request for future version."""

    code = 1009
    name = "future_version"


class NotCommittedError(KvqError):
    """1020 not_committed: transaction not committed due to conflict with another transaction."""

    code = 1020
    name = "not_committed"


class CommitUnknownResultError(KvqError):
    """1021 commit_unknown_result: transaction may or may not have committed."""

    code = 1021
    name = "commit_unknown_result"


class TransactionCancelledError(KvqError):
    """1025 transaction_cancelled: operation aborted because the transaction was cancelled."""

    code = 1025
    name = "transaction_cancelled"


class WatchCancelledError(KvqError):
    """1029 watch_cancelled: operation aborted because the watch was cancelled."""

    code = 1029
    name = "watch_cancelled"


class TransactionTimedOutError(KvqError):
    """1031 transaction_timed_out: operation aborted because the transaction timed out."""

    code = 1031
    name = "transaction_timed_out"


class TooManyWatchesError(KvqError):
    """1032 too_many_watches: too many watches are currently set."""

    code = 1032
    name = "too_many_watches"


class WatchesDisabledError(KvqError):
    """1034 watches_disabled: watches are disabled."""

    code = 1034
    name = "watches_disabled"


class AccessedUnreadableError(KvqError):
    """1036 accessed_unreadable: read or wrote an unreadable key (one written with a versionstamp in this transaction)."""

    code = 1036
    name = "accessed_unreadable"


class ProcessBehindError(KvqError):
    """1037 process_behind: storage process is behind."""

    code = 1037
    name = "process_behind"


class DatabaseLockedError(KvqError):
    """1038 database_locked: database is locked."""

    code = 1038
    name = "database_locked"


class ClusterVersionChangedError(KvqError):
    """1039 cluster_version_changed: the protocol version of the cluster has changed."""

    code = 1039
    name = "cluster_version_changed"


class OperationCancelledError(KvqError):
    """1101 operation_cancelled: asynchronous operation cancelled."""

    code = 1101
    name = "operation_cancelled"


class CommitProxyMemoryLimitExceededError(KvqError):
    """1042 commit_proxy_memory_limit_exceeded: the cluster's commit proxies are out of memory."""

    code = 1042
    name = "commit_proxy_memory_limit_exceeded"


class BatchTransactionThrottledError(KvqError):
    """1051 batch_transaction_throttled: batch priority transaction throttled."""

    code = 1051
    name = "batch_transaction_throttled"


class GrvProxyMemoryLimitExceededError(KvqError):
    """1078 grv_proxy_memory_limit_exceeded: the cluster's read version proxies are out of memory."""

    code = 1078
    name = "grv_proxy_memory_limit_exceeded"


class TagThrottledError(KvqError):
    """1213 tag_throttled: transaction tag is being throttled."""

    code = 1213
    name = "tag_throttled"


class ProxyTagThrottledError(KvqError):
    """1223 proxy_tag_throttled: exceeded the longest time a proxy may throttle a transaction's tag."""

    code = 1223
    name = "proxy_tag_throttled"


class TransactionThrottledHotShardError(KvqError):
    """1235 transaction_throttled_hot_shard: transaction throttled because it writes to a hot shard."""

    code = 1235
    name = "transaction_throttled_hot_shard"


class TransactionRejectedRangeLockedError(KvqError):
    """1242 transaction_rejected_range_locked: transaction rejected because a range is locked."""

    code = 1242
    name = "transaction_rejected_range_locked"


class ClientInvalidOperationError(KvqError):
    """2000 client_invalid_operation: invalid API call."""

    code = 2000
    name = "client_invalid_operation"


class KeyOutsideLegalRangeError(KvqError):
    """2004 key_outside_legal_range: key outside legal range (keys starting with 0xFF are reserved)."""

    code = 2004
    name = "key_outside_legal_range"


class InvertedRangeError(KvqError):
    """2005 inverted_range: range begin key is larger than end key."""

    code = 2005
    name = "inverted_range"


class InvalidOptionValueError(KvqError):
    """2006 invalid_option_value: option set with an invalid value."""

    code = 2006
    name = "invalid_option_value"


class InvalidOptionError(KvqError):
    """2007 invalid_option: option not valid in this context."""

    code = 2007
    name = "invalid_option"


class NetworkNotSetupError(KvqError):
    """2008 network_not_setup: the client network must be set up before this operation."""

    code = 2008
    name = "network_not_setup"


class NetworkAlreadySetupError(KvqError):
    """2009 network_already_setup: the client network is already set up."""

    code = 2009
    name = "network_already_setup"


class ReadVersionAlreadySetError(KvqError):
    """2010 read_version_already_set: the transaction already has a read version."""

    code = 2010
    name = "read_version_already_set"


class VersionInvalidError(KvqError):
    """2011 version_invalid: the version is not valid."""

    code = 2011
    name = "version_invalid"


class UsedDuringCommitError(KvqError):
    """2017 used_during_commit: operation issued while a commit was outstanding."""

    code = 2017
    name = "used_during_commit"


class InvalidMutationTypeError(KvqError):
    """2018 invalid_mutation_type: unrecognized atomic mutation type."""

    code = 2018
    name = "invalid_mutation_type"


class NoCommitVersionError(KvqError):
    """2021 no_commit_version: transaction has no commit version (it was read-only or not committed)."""

    code = 2021
    name = "no_commit_version"


class TransactionTooLargeError(KvqError):
    """2101 transaction_too_large: transaction exceeds the 10,000,000 byte limit."""

    code = 2101
    name = "transaction_too_large"


class KeyTooLargeError(KvqError):
    """2102 key_too_large: key is longer than 10,000 bytes."""

    code = 2102
    name = "key_too_large"


class ValueTooLargeError(KvqError):
    """2103 value_too_large: value is longer than 100,000 bytes."""

    code = 2103
    name = "value_too_large"


class ConnectionStringInvalidError(KvqError):
    """2104 connection_string_invalid: connection string or database URL is invalid."""

    code = 2104
    name = "connection_string_invalid"


class UnsupportedOperationError(KvqError):
    """2108 unsupported_operation: unsupported operation."""

    code = 2108
    name = "unsupported_operation"


class SpecialKeysNoModuleFoundError(KvqError):
    """2113 special_keys_no_module_found: the special key range read belongs to no module."""

    code = 2113
    name = "special_keys_no_module_found"


class SpecialKeysWriteDisabledError(KvqError):
    """2114 special_keys_write_disabled: writes to special keys are disabled."""

    code = 2114
    name = "special_keys_write_disabled"


class TenantsDisabledError(KvqError):
    """2136 tenants_disabled: tenants are disabled on this database."""

    code = 2136
    name = "tenants_disabled"


class UnknownTenantError(KvqError):
    """2137 unknown_tenant: the tenant was not found (retryable in 7.1)."""

    code = 2137
    name = "unknown_tenant"


class ApiVersionUnsetError(KvqError):
    """2200 api_version_unset: the API version is not set."""

    code = 2200
    name = "api_version_unset"


class ApiVersionAlreadySetError(KvqError):
    """2201 api_version_already_set: the API version may be set only once."""

    code = 2201
    name = "api_version_already_set"


class ApiVersionInvalidError(KvqError):
    """2202 api_version_invalid: API version is not valid."""

    code = 2202
    name = "api_version_invalid"


class ApiVersionNotSupportedError(KvqError):
    """2203 api_version_not_supported: API version not supported by the installed client library."""

    code = 2203
    name = "api_version_not_supported"


class UnknownError(KvqError):
    """4000 unknown_error: an unknown error occurred."""

    code = 4000
    name = "unknown_error"


class InternalError(KvqError):
    """4100 internal_error: an internal error occurred."""

    code = 4100
    name = "internal_error"


class InvalidArgumentError(KvqError, ValueError):
    """9001 invalid_argument: invalid argument."""

    code = 9001
    name = "invalid_argument"


class OutOfMemoryError(KvqError, MemoryError):
    """9002 out_of_memory: out of memory."""

    code = 9002
    name = "out_of_memory"


class NotFoundError(KvqError, LookupError):
    """9003 not_found: not found (or the queue is empty)."""

    code = 9003
    name = "not_found"


class DatabaseDamagedError(KvqError):
    """9004 database_damaged: the database is damaged."""

    code = 9004
    name = "database_damaged"


class IoError(KvqError):
    """9005 io_error: input/output error."""

    code = 9005
    name = "io_error"


class EngineUnavailableError(KvqError):
    """9006 engine_unavailable: the requested engine is not available."""

    code = 9006
    name = "engine_unavailable"


class UserError(KvqError):
    """9007 user_error: the caller's function reported a failure."""

    code = 9007
    name = "user_error"


class BufferTooSmallError(KvqError):
    """9008 buffer_too_small: the output buffer is too small."""

    code = 9008
    name = "buffer_too_small"


class InvalidTupleError(KvqError):
    """9009 invalid_tuple: malformed tuple encoding."""

    code = 9009
    name = "invalid_tuple"


class OutOfRangeError(KvqError):
    """9010 out_of_range: value is out of the representable range."""

    code = 9010
    name = "out_of_range"


class AlreadyExistsError(KvqError):
    """9011 already_exists: already exists."""

    code = 9011
    name = "already_exists"


class WrongTypeError(KvqError, TypeError):
    """9012 wrong_type: the object has another type."""

    code = 9012
    name = "wrong_type"


class DiskFullError(KvqError):
    """9013 disk_full: no space left on the device."""

    code = 9013
    name = "disk_full"


class PermissionDeniedError(KvqError):
    """9014 permission_denied: permission denied."""

    code = 9014
    name = "permission_denied"


class BusyError(KvqError):
    """9015 busy: the resource is busy."""

    code = 9015
    name = "busy"


class UnsupportedError(KvqError):
    """9016 unsupported: operation not supported by this engine."""

    code = 9016
    name = "unsupported"


class LeaseExpiredError(KvqError):
    """9017 lease_expired: the lease has expired; the item was or will be delivered again."""

    code = 9017
    name = "lease_expired"


class LeaseSettledError(KvqError):
    """9018 lease_settled: the lease was already ended by an ack or a nack."""

    code = 9018
    name = "lease_settled"


class ClosedError(InvalidArgumentError):
    """A handle (database, queue, work queue, transaction) was used after it was closed."""


class ForkedError(UnsupportedError):
    """A handle was used in a process forked from the one that opened it.

    kvq's handles never cross fork(): open the database again in the child.
    """


class LibraryNotFoundError(KvqError, ImportError):
    """libkvq.so could not be found or loaded; the message says where it was looked for."""

    name = "library_not_found"


_BY_CODE: Dict[int, Type[KvqError]] = {
    1004: TimedOutError,
    1007: TransactionTooOldError,
    1009: FutureVersionError,
    1020: NotCommittedError,
    1021: CommitUnknownResultError,
    1025: TransactionCancelledError,
    1029: WatchCancelledError,
    1031: TransactionTimedOutError,
    1032: TooManyWatchesError,
    1034: WatchesDisabledError,
    1036: AccessedUnreadableError,
    1037: ProcessBehindError,
    1038: DatabaseLockedError,
    1039: ClusterVersionChangedError,
    1101: OperationCancelledError,
    1042: CommitProxyMemoryLimitExceededError,
    1051: BatchTransactionThrottledError,
    1078: GrvProxyMemoryLimitExceededError,
    1213: TagThrottledError,
    1223: ProxyTagThrottledError,
    1235: TransactionThrottledHotShardError,
    1242: TransactionRejectedRangeLockedError,
    2000: ClientInvalidOperationError,
    2004: KeyOutsideLegalRangeError,
    2005: InvertedRangeError,
    2006: InvalidOptionValueError,
    2007: InvalidOptionError,
    2008: NetworkNotSetupError,
    2009: NetworkAlreadySetupError,
    2010: ReadVersionAlreadySetError,
    2011: VersionInvalidError,
    2017: UsedDuringCommitError,
    2018: InvalidMutationTypeError,
    2021: NoCommitVersionError,
    2101: TransactionTooLargeError,
    2102: KeyTooLargeError,
    2103: ValueTooLargeError,
    2104: ConnectionStringInvalidError,
    2108: UnsupportedOperationError,
    2113: SpecialKeysNoModuleFoundError,
    2114: SpecialKeysWriteDisabledError,
    2136: TenantsDisabledError,
    2137: UnknownTenantError,
    2200: ApiVersionUnsetError,
    2201: ApiVersionAlreadySetError,
    2202: ApiVersionInvalidError,
    2203: ApiVersionNotSupportedError,
    4000: UnknownError,
    4100: InternalError,
    9001: InvalidArgumentError,
    9002: OutOfMemoryError,
    9003: NotFoundError,
    9004: DatabaseDamagedError,
    9005: IoError,
    9006: EngineUnavailableError,
    9007: UserError,
    9008: BufferTooSmallError,
    9009: InvalidTupleError,
    9010: OutOfRangeError,
    9011: AlreadyExistsError,
    9012: WrongTypeError,
    9013: DiskFullError,
    9014: PermissionDeniedError,
    9015: BusyError,
    9016: UnsupportedError,
    9017: LeaseExpiredError,
    9018: LeaseSettledError,
}


def error_class(code: int) -> Type[KvqError]:
    """The exception class of a kvq error code (KvqError itself for an unknown code)."""
    return _BY_CODE.get(code, KvqError)
