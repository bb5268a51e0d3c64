"""Router and request/response types: pure, no sockets."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from magnetar.bookkeeper.runtime.http import (
    HttpError,
    HttpRequest,
    HttpResponse,
    HttpSettings,
    QueryParams,
    RequestHead,
    Router,
    WebSocketRequest,
    error_response,
    json_response,
)
from magnetar.bookkeeper.runtime.http.router import compile_pattern


async def ok(request: HttpRequest) -> HttpResponse:
    return HttpResponse(200)


async def other(request: HttpRequest) -> HttpResponse:
    return HttpResponse(201)


async def ws_handler(request: WebSocketRequest) -> None:
    return None


def test_single_segment_params_are_percent_decoded() -> None:
    router = Router()
    router.get("/admin/v2/persistent/{tenant}/{namespace}/{topic}", ok)
    handler, params = router.match_http("GET", "/admin/v2/persistent/t/ns/my%20topic%2Fx")
    assert handler is ok
    assert params == {"tenant": "t", "namespace": "ns", "topic": "my topic/x"}


def test_encoded_slash_never_splits_a_segment() -> None:
    router = Router()
    router.get("/a/{x}", ok)
    assert router.match_http("GET", "/a/b%2Fc")[1] == {"x": "b/c"}
    with pytest.raises(HttpError) as err:
        router.match_http("GET", "/a/b/c")
    assert err.value.status == 404


def test_path_placeholder_spans_segments_before_a_final_segment() -> None:
    router = Router()
    router.websocket("/ws/v2/consumer/{domain}/{tenant}/{namespace}/{topic:path}/{subscription}", ws_handler)
    match = router.match_websocket("/ws/v2/consumer/persistent/t/ns/a/b/sub")
    assert match is not None
    assert match[1] == {
        "domain": "persistent",
        "tenant": "t",
        "namespace": "ns",
        "topic": "a/b",
        "subscription": "sub",
    }
    assert router.match_websocket("/ws/v2/consumer/persistent/t/ns/sub") is None
    assert router.match_websocket("/other") is None


def test_unknown_path_is_404_and_wrong_method_is_405_with_allow() -> None:
    router = Router()
    router.get("/x", ok)
    router.post("/x", other)
    with pytest.raises(HttpError) as err:
        router.match_http("GET", "/y")
    assert err.value.status == 404
    with pytest.raises(HttpError) as err:
        router.match_http("DELETE", "/x")
    assert err.value.status == 405
    assert dict(err.value.headers)["allow"] == "GET, HEAD, POST"


def test_head_falls_back_to_get_and_methods_are_distinct() -> None:
    router = Router()
    router.get("/x", ok)
    router.post("/x", other)
    assert router.match_http("HEAD", "/x")[0] is ok
    assert router.match_http("POST", "/x")[0] is other


def test_first_registered_pattern_wins() -> None:
    router = Router()
    router.get("/a/fixed", ok)
    router.get("/a/{name}", other)
    assert router.match_http("GET", "/a/fixed")[0] is ok
    assert router.match_http("GET", "/a/else")[0] is other


def test_bad_utf8_in_a_path_parameter_is_400() -> None:
    router = Router()
    router.get("/a/{x}", ok)
    with pytest.raises(HttpError) as err:
        router.match_http("GET", "/a/%ff")
    assert err.value.status == 400


@pytest.mark.parametrize("pattern", ["no-slash", "/a/{x}/{x}", "/a/{x", "/a/{1x}"])
def test_malformed_patterns_are_rejected(pattern: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        compile_pattern(pattern)


def test_duplicate_routes_are_rejected() -> None:
    router = Router()
    router.get("/x", ok)
    with pytest.raises(ValueError, match="already routed"):
        router.get("/x", other)
    router.websocket("/w", ws_handler)
    with pytest.raises(ValueError, match="already routed"):
        router.websocket("/w", ws_handler)
    with pytest.raises(ValueError, match="unsupported method"):
        router.route("BREW", "/coffee", ok)


def test_query_params_keep_order_blank_values_and_first_value_semantics() -> None:
    query = QueryParams.parse("a=1&b=&a=2&c=x%20y+z")
    assert query["a"] == "1"
    assert query.get_all("a") == ["1", "2"]
    assert query["b"] == ""
    assert query["c"] == "x y z"
    assert "missing" not in query
    assert len(query) == 3
    assert QueryParams.parse("") == {}


def test_undecodable_query_is_400() -> None:
    with pytest.raises(HttpError) as err:
        QueryParams.parse("a=%ff")
    assert err.value.status == 400


def test_too_many_query_fields_is_400() -> None:
    with pytest.raises(HttpError) as err:
        QueryParams.parse("&".join(f"k{i}=v" for i in range(5000)))
    assert err.value.status == 400


def test_json_helpers_write_compact_utf8() -> None:
    response = json_response({"a": "é", "b": [1, 2]}, status=201)
    assert response.status == 201
    assert response.body == '{"a":"é","b":[1,2]}'.encode()
    assert ("content-type", "application/json") in response.headers
    assert error_response(404, "Topic not found").body == b'{"reason":"Topic not found"}'


def test_request_json_and_headers() -> None:
    head = RequestHead(
        method="POST",
        target="/x?y=1",
        path="/x",
        query=QueryParams.parse("y=1"),
        headers=(("content-type", "application/json"), ("x-a", "1"), ("x-a", "2")),
        path_params={},
        client=None,
    )
    assert HttpRequest(head, b'{"k": 1}').json() == {"k": 1}
    assert head.header("X-A") == "1"
    assert head.header_all("x-a") == ["1", "2"]
    with pytest.raises(HttpError) as err:
        HttpRequest(head, b"{nope").json()
    assert err.value.status == 400


def test_response_status_must_be_final() -> None:
    with pytest.raises(ValueError, match="final response"):
        HttpResponse(101)
    with pytest.raises(ValueError, match="final response"):
        HttpResponse(99)


def test_settings_validate_ranges_and_relations() -> None:
    assert HttpSettings().ws_idle_timeout_ms == 300_000
    assert HttpSettings().ws_frame_bytes_max == 5 * 1024 * 1024
    with pytest.raises(ValidationError):
        HttpSettings(http_port=70000)
    with pytest.raises(ValidationError):
        HttpSettings(ws_idle_timeout_ms=1000, ws_close_timeout_ms=2000)
    with pytest.raises(ValidationError):
        HttpSettings(unknown_setting=1)  # type: ignore[call-arg]
