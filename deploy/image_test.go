package deploy

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestImageBuildsWhatMakeBuilds checks the Dockerfile where no docker runs:
// its build stage runs `make build` on the Go of go.mod, copies the binary
// from where the Makefile writes it (static: CGO_ENABLED=0), and its final
// stage runs that binary as pdlb's entrypoint, as a non-root user, on
// distroless static (CA certificates, no shell), the user the pods run as.
func TestImageBuildsWhatMakeBuilds(t *testing.T) {
	read := func(path string) string {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	dockerfile, makefile, gomod := read("Dockerfile"), read("../Makefile"), read("../go.mod")
	bin := regexp.MustCompile(`(?m)^BIN\s*:=\s*(\S+)$`).FindStringSubmatch(makefile)
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(gomod)
	if bin == nil || goVersion == nil || !strings.Contains(makefile, "CGO_ENABLED=0 $(GO) build") {
		t.Fatalf("the Makefile names no BIN, go.mod no go line, or make build is not static")
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^FROM golang:` + regexp.QuoteMeta(goVersion[1]) + ` AS build$`),
		regexp.MustCompile(`(?m)^\s+make build VERSION=\$\{VERSION\}$`),
		regexp.MustCompile(`(?m)^FROM gcr\.io/distroless/static-debian\d+:nonroot$`),
		regexp.MustCompile(`(?m)^COPY --from=build /src/` + regexp.QuoteMeta(bin[1]) + ` /pdlb$`),
		regexp.MustCompile(`(?m)^ENTRYPOINT \["/pdlb"\]$`),
	} {
		if !want.MatchString(dockerfile) {
			t.Errorf("the Dockerfile has no line matching %s", want)
		}
	}
	users := regexp.MustCompile(`(?m)^USER (\S+)$`).FindAllStringSubmatch(dockerfile, -1)
	if len(users) == 0 {
		t.Fatal("the Dockerfile sets no USER: the image would run as root")
	}
	user, _, _ := strings.Cut(users[len(users)-1][1], ":")
	if user == "0" || user == "root" {
		t.Errorf("the image runs as %q; want a user that is not root", user)
	}
	// runAsNonRoot can only check a numeric user, and the pods run as it.
	d := objectOf[*appsv1.Deployment](t, render(t, "kubernetes"))
	if sc := d.Spec.Template.Spec.SecurityContext; sc == nil || sc.RunAsUser == nil || strconv.FormatInt(*sc.RunAsUser, 10) != user {
		t.Errorf("the image's USER is %q; want the Deployment's runAsUser, a number", user)
	}
}
