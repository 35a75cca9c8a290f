package bench

import (
	"fmt"
	"net/url"
	"strings"
)

// routes are the APIs a run can call. None ends another, so a path ends in
// at most one of them.
var routes = [...]string{RouteGenerate, RouteCompletions, RouteChatCompletions}

// openAIBase is the path OpenAI clients take as the base of their routes
// (base_url "http://host:8000/v1"), which the OpenAI routes start with.
const openAIBase = "/v1"

// URLRoute returns the route rawURL's path ends in (a trailing slash
// aside), or "" when it ends in none or does not parse. A target given as
// http://host:8000/generate must not be sent to /generate/generate, where
// every request fails with a 404.
func URLRoute(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	_, route := splitRoute(u.EscapedPath())
	return route
}

// splitRoute cuts a URL path into the prefix before a route it ends in and
// that route, or returns the path, without a trailing slash, and "".
func splitRoute(path string) (prefix, route string) {
	path = strings.TrimSuffix(path, "/")
	for _, r := range routes {
		if strings.HasSuffix(path, r) {
			return strings.TrimSuffix(path, r), r
		}
	}
	return path, ""
}

// endpointPath returns the path requests for route go to at a URL of this
// path. A path that ends in a route is that route's, which must be route.
// Otherwise the path is a prefix the route is appended to (a target behind
// a proxy that serves it under /prefix/), but for a prefix ending in /v1,
// an OpenAI base URL: the OpenAI routes already start with it, and
// /generate has no place under it.
func endpointPath(path, route string) (string, error) {
	prefix, own := splitRoute(path)
	switch {
	case own != "" && own != route:
		return "", fmt.Errorf("ends in route %s, but the route asked for is %s", own, route)
	case own != "":
		return prefix + own, nil
	case !strings.HasSuffix(prefix, openAIBase):
		return prefix + route, nil
	case route == RouteGenerate:
		return "", fmt.Errorf("ends in %s, an OpenAI base url, but the route asked for is %s: ask for %s or %s, or leave %s out",
			openAIBase, RouteGenerate, RouteCompletions, RouteChatCompletions, openAIBase)
	}
	return strings.TrimSuffix(prefix, openAIBase) + route, nil
}

// resolveRoute returns the route to call at every one of urls: the one
// they end in, which must be route when route is not empty, and the same
// for all; route when none ends in one.
func resolveRoute(route string, urls ...string) (string, error) {
	var from string // the url the route came from, if one did
	for _, u := range urls {
		own := URLRoute(u)
		switch {
		case own == "" || own == route:
		case route == "":
			route, from = own, u
		case from != "":
			return "", fmt.Errorf("url %q ends in route %s, but url %q in %s: every target is sent the same requests", u, own, from, route)
		default:
			return "", fmt.Errorf("url %q ends in route %s, but the route asked for is %s: give the url without its route, or ask for %s", u, own, route, own)
		}
	}
	return route, nil
}
