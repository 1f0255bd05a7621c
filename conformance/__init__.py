"""Conformance: the Responses streaming contract and the Open Responses schema, checked on any stream or body; and
`responses-server check URL`, the end-to-end scenarios run against any /v1/responses endpoint."""
