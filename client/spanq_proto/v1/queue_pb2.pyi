import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TypeCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TYPE_CODE_UNSPECIFIED: _ClassVar[TypeCode]
    BOOL: _ClassVar[TypeCode]
    INT64: _ClassVar[TypeCode]
    TIMESTAMP: _ClassVar[TypeCode]
    STRING: _ClassVar[TypeCode]
    BYTES: _ClassVar[TypeCode]
    JSON: _ClassVar[TypeCode]
TYPE_CODE_UNSPECIFIED: TypeCode
BOOL: TypeCode
INT64: TypeCode
TIMESTAMP: TypeCode
STRING: TypeCode
BYTES: TypeCode
JSON: TypeCode

class KeyColumn(_message.Message):
    __slots__ = ("name", "type", "generated_as")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    GENERATED_AS_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: TypeCode
    generated_as: str
    def __init__(self, name: _Optional[str] = ..., type: _Optional[_Union[TypeCode, str]] = ..., generated_as: _Optional[str] = ...) -> None: ...

class Queue(_message.Message):
    __slots__ = ("name", "key_columns", "payload_type", "parent_table", "lease_duration", "initial_backoff", "max_backoff", "max_delivery_attempts", "dead_letter_queue", "create_time", "disable_send", "disable_delivery", "message_retention_duration", "archive_duration", "enable_message_ordering", "max_in_flight_per_key", "concurrency_key", "rate_limit", "rate_limit_burst")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KEY_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_TYPE_FIELD_NUMBER: _ClassVar[int]
    PARENT_TABLE_FIELD_NUMBER: _ClassVar[int]
    LEASE_DURATION_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_QUEUE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    DISABLE_SEND_FIELD_NUMBER: _ClassVar[int]
    DISABLE_DELIVERY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_RETENTION_DURATION_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_DURATION_FIELD_NUMBER: _ClassVar[int]
    ENABLE_MESSAGE_ORDERING_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_PER_KEY_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_BURST_FIELD_NUMBER: _ClassVar[int]
    name: str
    key_columns: _containers.RepeatedCompositeFieldContainer[KeyColumn]
    payload_type: TypeCode
    parent_table: str
    lease_duration: _duration_pb2.Duration
    initial_backoff: _duration_pb2.Duration
    max_backoff: _duration_pb2.Duration
    max_delivery_attempts: int
    dead_letter_queue: str
    create_time: _timestamp_pb2.Timestamp
    disable_send: bool
    disable_delivery: bool
    message_retention_duration: _duration_pb2.Duration
    archive_duration: _duration_pb2.Duration
    enable_message_ordering: bool
    max_in_flight_per_key: int
    concurrency_key: str
    rate_limit: float
    rate_limit_burst: int
    def __init__(self, name: _Optional[str] = ..., key_columns: _Optional[_Iterable[_Union[KeyColumn, _Mapping]]] = ..., payload_type: _Optional[_Union[TypeCode, str]] = ..., parent_table: _Optional[str] = ..., lease_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., initial_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_delivery_attempts: _Optional[int] = ..., dead_letter_queue: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., disable_send: _Optional[bool] = ..., disable_delivery: _Optional[bool] = ..., message_retention_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., archive_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., enable_message_ordering: _Optional[bool] = ..., max_in_flight_per_key: _Optional[int] = ..., concurrency_key: _Optional[str] = ..., rate_limit: _Optional[float] = ..., rate_limit_burst: _Optional[int] = ...) -> None: ...

class UpdateQueueRequest(_message.Message):
    __slots__ = ("queue", "update_mask")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    update_mask: _field_mask_pb2.FieldMask
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class CreateQueueRequest(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ...) -> None: ...

class GetQueueRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ("queues", "next_page_token")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[Queue]
    next_page_token: str
    def __init__(self, queues: _Optional[_Iterable[_Union[Queue, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DropQueueRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class SendMessage(_message.Message):
    __slots__ = ("key", "payload", "deliver_time", "delay", "headers", "priority", "ordering_key")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    KEY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    DELIVER_TIME_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    ORDERING_KEY_FIELD_NUMBER: _ClassVar[int]
    key: _struct_pb2.ListValue
    payload: _struct_pb2.Value
    deliver_time: _timestamp_pb2.Timestamp
    delay: _duration_pb2.Duration
    headers: _containers.ScalarMap[str, str]
    priority: int
    ordering_key: str
    def __init__(self, key: _Optional[_Union[_struct_pb2.ListValue, _Mapping]] = ..., payload: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., deliver_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., headers: _Optional[_Mapping[str, str]] = ..., priority: _Optional[int] = ..., ordering_key: _Optional[str] = ...) -> None: ...

class SendRequest(_message.Message):
    __slots__ = ("queue", "messages", "request_id")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    queue: str
    messages: _containers.RepeatedCompositeFieldContainer[SendMessage]
    request_id: str
    def __init__(self, queue: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[SendMessage, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class SendResponse(_message.Message):
    __slots__ = ("keys", "replayed")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[_struct_pb2.ListValue]
    replayed: bool
    def __init__(self, keys: _Optional[_Iterable[_Union[_struct_pb2.ListValue, _Mapping]]] = ..., replayed: _Optional[bool] = ...) -> None: ...

class ReceiveRequest(_message.Message):
    __slots__ = ("queue", "max_batch_size", "max_duration", "lease_duration", "max_outstanding")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_DURATION_FIELD_NUMBER: _ClassVar[int]
    LEASE_DURATION_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTSTANDING_FIELD_NUMBER: _ClassVar[int]
    queue: str
    max_batch_size: int
    max_duration: _duration_pb2.Duration
    lease_duration: _duration_pb2.Duration
    max_outstanding: int
    def __init__(self, queue: _Optional[str] = ..., max_batch_size: _Optional[int] = ..., max_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., lease_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_outstanding: _Optional[int] = ...) -> None: ...

class ReceivedMessage(_message.Message):
    __slots__ = ("key", "payload", "deliver_time", "lease_token", "lease_expiration_time", "delivery_attempt", "enqueue_time", "last_batch_message", "dead_letter", "headers", "priority", "ordering_key")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    KEY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    DELIVER_TIME_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRATION_TIME_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ENQUEUE_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_BATCH_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    ORDERING_KEY_FIELD_NUMBER: _ClassVar[int]
    key: _struct_pb2.ListValue
    payload: _struct_pb2.Value
    deliver_time: _timestamp_pb2.Timestamp
    lease_token: str
    lease_expiration_time: _timestamp_pb2.Timestamp
    delivery_attempt: int
    enqueue_time: _timestamp_pb2.Timestamp
    last_batch_message: bool
    dead_letter: DeadLetter
    headers: _containers.ScalarMap[str, str]
    priority: int
    ordering_key: str
    def __init__(self, key: _Optional[_Union[_struct_pb2.ListValue, _Mapping]] = ..., payload: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., deliver_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lease_token: _Optional[str] = ..., lease_expiration_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delivery_attempt: _Optional[int] = ..., enqueue_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_batch_message: _Optional[bool] = ..., dead_letter: _Optional[_Union[DeadLetter, _Mapping]] = ..., headers: _Optional[_Mapping[str, str]] = ..., priority: _Optional[int] = ..., ordering_key: _Optional[str] = ...) -> None: ...

class ReceiveResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ReceivedMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[ReceivedMessage, _Mapping]]] = ...) -> None: ...

class AckMessage(_message.Message):
    __slots__ = ("key", "lease_token")
    KEY_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    key: _struct_pb2.ListValue
    lease_token: str
    def __init__(self, key: _Optional[_Union[_struct_pb2.ListValue, _Mapping]] = ..., lease_token: _Optional[str] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("queue", "acks", "ignore_not_found", "request_id")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_NOT_FOUND_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    queue: str
    acks: _containers.RepeatedCompositeFieldContainer[AckMessage]
    ignore_not_found: bool
    request_id: str
    def __init__(self, queue: _Optional[str] = ..., acks: _Optional[_Iterable[_Union[AckMessage, _Mapping]]] = ..., ignore_not_found: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class AckResult(_message.Message):
    __slots__ = ("key", "acked")
    KEY_FIELD_NUMBER: _ClassVar[int]
    ACKED_FIELD_NUMBER: _ClassVar[int]
    key: _struct_pb2.ListValue
    acked: bool
    def __init__(self, key: _Optional[_Union[_struct_pb2.ListValue, _Mapping]] = ..., acked: _Optional[bool] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = ("results", "replayed")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AckResult]
    replayed: bool
    def __init__(self, results: _Optional[_Iterable[_Union[AckResult, _Mapping]]] = ..., replayed: _Optional[bool] = ...) -> None: ...

class RenewLeaseRequest(_message.Message):
    __slots__ = ("queue", "lease_tokens", "lease_duration", "request_id", "reason")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LEASE_DURATION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    queue: str
    lease_tokens: _containers.RepeatedScalarFieldContainer[str]
    lease_duration: _duration_pb2.Duration
    request_id: str
    reason: str
    def __init__(self, queue: _Optional[str] = ..., lease_tokens: _Optional[_Iterable[str]] = ..., lease_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., request_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RenewedLease(_message.Message):
    __slots__ = ("old_lease_token", "new_lease_token", "lease_expiration_time")
    OLD_LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NEW_LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRATION_TIME_FIELD_NUMBER: _ClassVar[int]
    old_lease_token: str
    new_lease_token: str
    lease_expiration_time: _timestamp_pb2.Timestamp
    def __init__(self, old_lease_token: _Optional[str] = ..., new_lease_token: _Optional[str] = ..., lease_expiration_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RenewLeaseResponse(_message.Message):
    __slots__ = ("leases", "replayed")
    LEASES_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[RenewedLease]
    replayed: bool
    def __init__(self, leases: _Optional[_Iterable[_Union[RenewedLease, _Mapping]]] = ..., replayed: _Optional[bool] = ...) -> None: ...

class Mutation(_message.Message):
    __slots__ = ("send", "ack", "renew_lease")
    SEND_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    RENEW_LEASE_FIELD_NUMBER: _ClassVar[int]
    send: SendRequest
    ack: AckRequest
    renew_lease: RenewLeaseRequest
    def __init__(self, send: _Optional[_Union[SendRequest, _Mapping]] = ..., ack: _Optional[_Union[AckRequest, _Mapping]] = ..., renew_lease: _Optional[_Union[RenewLeaseRequest, _Mapping]] = ...) -> None: ...

class MutationResult(_message.Message):
    __slots__ = ("send", "ack", "renew_lease")
    SEND_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    RENEW_LEASE_FIELD_NUMBER: _ClassVar[int]
    send: SendResponse
    ack: AckResponse
    renew_lease: RenewLeaseResponse
    def __init__(self, send: _Optional[_Union[SendResponse, _Mapping]] = ..., ack: _Optional[_Union[AckResponse, _Mapping]] = ..., renew_lease: _Optional[_Union[RenewLeaseResponse, _Mapping]] = ...) -> None: ...

class CommitRequest(_message.Message):
    __slots__ = ("request_id", "mutations")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MUTATIONS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    mutations: _containers.RepeatedCompositeFieldContainer[Mutation]
    def __init__(self, request_id: _Optional[str] = ..., mutations: _Optional[_Iterable[_Union[Mutation, _Mapping]]] = ...) -> None: ...

class CommitResponse(_message.Message):
    __slots__ = ("results", "replayed")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[MutationResult]
    replayed: bool
    def __init__(self, results: _Optional[_Iterable[_Union[MutationResult, _Mapping]]] = ..., replayed: _Optional[bool] = ...) -> None: ...

class GetQueueStatsRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class QueueStats(_message.Message):
    __slots__ = ("name", "ready", "scheduled", "leased", "dead_lettered", "oldest_ready_age", "send_rate", "ack_rate", "dead_letter_queue", "read_time", "disable_send", "disable_delivery", "held", "rate_limited", "rate_limit_tokens", "key_limited", "keys_at_limit")
    NAME_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    OLDEST_READY_AGE_FIELD_NUMBER: _ClassVar[int]
    SEND_RATE_FIELD_NUMBER: _ClassVar[int]
    ACK_RATE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_QUEUE_FIELD_NUMBER: _ClassVar[int]
    READ_TIME_FIELD_NUMBER: _ClassVar[int]
    DISABLE_SEND_FIELD_NUMBER: _ClassVar[int]
    DISABLE_DELIVERY_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMITED_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    KEY_LIMITED_FIELD_NUMBER: _ClassVar[int]
    KEYS_AT_LIMIT_FIELD_NUMBER: _ClassVar[int]
    name: str
    ready: int
    scheduled: int
    leased: int
    dead_lettered: int
    oldest_ready_age: _duration_pb2.Duration
    send_rate: float
    ack_rate: float
    dead_letter_queue: str
    read_time: _timestamp_pb2.Timestamp
    disable_send: bool
    disable_delivery: bool
    held: int
    rate_limited: int
    rate_limit_tokens: float
    key_limited: int
    keys_at_limit: int
    def __init__(self, name: _Optional[str] = ..., ready: _Optional[int] = ..., scheduled: _Optional[int] = ..., leased: _Optional[int] = ..., dead_lettered: _Optional[int] = ..., oldest_ready_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., send_rate: _Optional[float] = ..., ack_rate: _Optional[float] = ..., dead_letter_queue: _Optional[str] = ..., read_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., disable_send: _Optional[bool] = ..., disable_delivery: _Optional[bool] = ..., held: _Optional[int] = ..., rate_limited: _Optional[int] = ..., rate_limit_tokens: _Optional[float] = ..., key_limited: _Optional[int] = ..., keys_at_limit: _Optional[int] = ...) -> None: ...

class PeekRequest(_message.Message):
    __slots__ = ("queue", "page_size", "page_token", "archived")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    queue: str
    page_size: int
    page_token: str
    archived: bool
    def __init__(self, queue: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., archived: _Optional[bool] = ...) -> None: ...

class PeekedMessage(_message.Message):
    __slots__ = ("key", "payload", "deliver_time", "lease_expiration_time", "delivery_attempt", "enqueue_time", "state", "dead_letter", "headers", "priority", "ack_time", "ack_request_id", "ordering_key")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[PeekedMessage.State]
        READY: _ClassVar[PeekedMessage.State]
        SCHEDULED: _ClassVar[PeekedMessage.State]
        LEASED: _ClassVar[PeekedMessage.State]
        ACKED: _ClassVar[PeekedMessage.State]
        HELD: _ClassVar[PeekedMessage.State]
    STATE_UNSPECIFIED: PeekedMessage.State
    READY: PeekedMessage.State
    SCHEDULED: PeekedMessage.State
    LEASED: PeekedMessage.State
    ACKED: PeekedMessage.State
    HELD: PeekedMessage.State
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    KEY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    DELIVER_TIME_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRATION_TIME_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ENQUEUE_TIME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    ACK_TIME_FIELD_NUMBER: _ClassVar[int]
    ACK_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ORDERING_KEY_FIELD_NUMBER: _ClassVar[int]
    key: _struct_pb2.ListValue
    payload: _struct_pb2.Value
    deliver_time: _timestamp_pb2.Timestamp
    lease_expiration_time: _timestamp_pb2.Timestamp
    delivery_attempt: int
    enqueue_time: _timestamp_pb2.Timestamp
    state: PeekedMessage.State
    dead_letter: DeadLetter
    headers: _containers.ScalarMap[str, str]
    priority: int
    ack_time: _timestamp_pb2.Timestamp
    ack_request_id: str
    ordering_key: str
    def __init__(self, key: _Optional[_Union[_struct_pb2.ListValue, _Mapping]] = ..., payload: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., deliver_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lease_expiration_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delivery_attempt: _Optional[int] = ..., enqueue_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., state: _Optional[_Union[PeekedMessage.State, str]] = ..., dead_letter: _Optional[_Union[DeadLetter, _Mapping]] = ..., headers: _Optional[_Mapping[str, str]] = ..., priority: _Optional[int] = ..., ack_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ack_request_id: _Optional[str] = ..., ordering_key: _Optional[str] = ...) -> None: ...

class DeadLetter(_message.Message):
    __slots__ = ("source_queue", "delivery_attempts", "dead_letter_time", "last_failure")
    SOURCE_QUEUE_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_FAILURE_FIELD_NUMBER: _ClassVar[int]
    source_queue: str
    delivery_attempts: int
    dead_letter_time: _timestamp_pb2.Timestamp
    last_failure: str
    def __init__(self, source_queue: _Optional[str] = ..., delivery_attempts: _Optional[int] = ..., dead_letter_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_failure: _Optional[str] = ...) -> None: ...

class PeekResponse(_message.Message):
    __slots__ = ("messages", "next_page_token")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[PeekedMessage]
    next_page_token: str
    def __init__(self, messages: _Optional[_Iterable[_Union[PeekedMessage, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class PurgeRequest(_message.Message):
    __slots__ = ("queue", "sent_before")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    SENT_BEFORE_FIELD_NUMBER: _ClassVar[int]
    queue: str
    sent_before: _timestamp_pb2.Timestamp
    def __init__(self, queue: _Optional[str] = ..., sent_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class PurgeResponse(_message.Message):
    __slots__ = ("purged",)
    PURGED_FIELD_NUMBER: _ClassVar[int]
    purged: int
    def __init__(self, purged: _Optional[int] = ...) -> None: ...

class RedriveRequest(_message.Message):
    __slots__ = ("queue", "to", "batch_size", "rate", "max_messages")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    queue: str
    to: str
    batch_size: int
    rate: float
    max_messages: int
    def __init__(self, queue: _Optional[str] = ..., to: _Optional[str] = ..., batch_size: _Optional[int] = ..., rate: _Optional[float] = ..., max_messages: _Optional[int] = ...) -> None: ...

class RedriveProgress(_message.Message):
    __slots__ = ("moved", "remaining", "skipped", "to", "done")
    MOVED_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    moved: int
    remaining: int
    skipped: int
    to: str
    done: bool
    def __init__(self, moved: _Optional[int] = ..., remaining: _Optional[int] = ..., skipped: _Optional[int] = ..., to: _Optional[str] = ..., done: _Optional[bool] = ...) -> None: ...

class ReplayRequest(_message.Message):
    __slots__ = ("queue", "start_time", "end_time", "start_key", "end_key", "request_id", "batch_size", "rate", "validate_only")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    START_KEY_FIELD_NUMBER: _ClassVar[int]
    END_KEY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    queue: str
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    start_key: _struct_pb2.ListValue
    end_key: _struct_pb2.ListValue
    request_id: str
    batch_size: int
    rate: float
    validate_only: bool
    def __init__(self, queue: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_key: _Optional[_Union[_struct_pb2.ListValue, _Mapping]] = ..., end_key: _Optional[_Union[_struct_pb2.ListValue, _Mapping]] = ..., request_id: _Optional[str] = ..., batch_size: _Optional[int] = ..., rate: _Optional[float] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class ReplayProgress(_message.Message):
    __slots__ = ("sent", "skipped", "remaining", "done", "replayed", "request_id")
    SENT_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    sent: int
    skipped: int
    remaining: int
    done: bool
    replayed: bool
    request_id: str
    def __init__(self, sent: _Optional[int] = ..., skipped: _Optional[int] = ..., remaining: _Optional[int] = ..., done: _Optional[bool] = ..., replayed: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...
