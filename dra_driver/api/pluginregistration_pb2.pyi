from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class PluginInfo(_message.Message):
    __slots__ = ("type", "name", "endpoint", "supported_versions")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    SUPPORTED_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    type: str
    name: str
    endpoint: str
    supported_versions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, type: _Optional[str] = ..., name: _Optional[str] = ..., endpoint: _Optional[str] = ..., supported_versions: _Optional[_Iterable[str]] = ...) -> None: ...

class RegistrationStatus(_message.Message):
    __slots__ = ("plugin_registered", "error")
    PLUGIN_REGISTERED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    plugin_registered: bool
    error: str
    def __init__(self, plugin_registered: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class RegistrationStatusResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
