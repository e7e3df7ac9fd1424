// Command snippets type-checks the Go snippets of the repository's README
// files against the real packages, so that a snippet a reader copies
// compiles: a renamed function, an option of the wrong kind or a wrong
// argument fails CI. CI runs it from the repository's root in the
// workspace (go.work), where every module's packages resolve:
//
//	go run ./internal/cmd/snippets README.md */README.md
//
// A snippet that starts with a package clause is checked as the file it
// is. Any other is a fragment: it uses names its reader's program has (a
// payload type, a context, a handler), which prelude declares at package
// level; the fragment goes in a function body (a name it declares shadows
// its placeholder), after its import block if it has one, and the packages
// it names are imported (see imports). Errors about unused names, which
// fragments have by nature, are not counted; every other one is.
//
// A snippet that is a file of the repository says so in an HTML comment
// on the line before its fence, <!-- file: examples/x/main.go --> (the
// path from the README's directory): it must be that file, byte for byte,
// which the build and the tests compile and run.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

func main() {
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: snippets README.md...")
		os.Exit(2)
	}
	c := newChecker()
	failed := false
	total := 0
	for _, path := range flag.Args() {
		b, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		for _, s := range extract(string(b)) {
			total++
			if s.file != "" {
				s.file = filepath.Join(filepath.Dir(path), s.file)
			}
			if err := c.check(s); err != nil {
				failed = true
				fmt.Printf("%s:%d: %v\n\n", path, s.line, err)
			}
		}
	}
	if failed {
		os.Exit(1)
	}
	fmt.Printf("%d snippets of %d files compile\n", total, flag.NArg())
}

// snippet is a ```go block, the line of the file it starts on, the names
// its given comment declares, and the file its file comment names.
type snippet struct {
	text  string
	line  int
	given [][2]string
	file  string
}

func extract(md string) []snippet {
	var out []snippet
	var cur []string
	var names [][2]string
	file := ""
	start := -1
	lines := strings.Split(md, "\n")
	for i, l := range lines {
		switch t := strings.TrimSpace(l); {
		case start < 0 && t == "```go":
			start, cur, names, file = i+2, nil, nil, ""
			if i > 0 {
				if m := fileComment.FindStringSubmatch(lines[i-1]); m != nil {
					file = strings.TrimSpace(m[1])
				}
				if m := givenComment.FindStringSubmatch(lines[i-1]); m != nil {
					for _, decl := range strings.Split(m[1], ";") {
						if name, typ, ok := strings.Cut(strings.TrimSpace(decl), " "); ok {
							names = append(names, [2]string{name, strings.TrimSpace(typ)})
						}
					}
				}
			}
		case start >= 0 && t == "```":
			out = append(out, snippet{strings.Join(cur, "\n"), start, names, file})
			start = -1
		case start >= 0:
			cur = append(cur, l)
		}
	}
	return out
}

// imports are the packages a fragment may name, by the name it uses.
var imports = map[string]string{
	"broker": "github.com/leasebus/leasebus/broker", "brokertest": "github.com/leasebus/leasebus/broker/brokertest",
	"queue": "github.com/leasebus/leasebus/queue", "poller": "github.com/leasebus/leasebus/poller",
	"lease": "github.com/leasebus/leasebus/lease", "console": "github.com/leasebus/leasebus/console",
	"backend":        "github.com/leasebus/leasebus/backend",
	"natsleasebus":   "github.com/leasebus/leasebus/natsleasebus",
	"otelleasebus":   "github.com/leasebus/leasebus/otelleasebus",
	"leasebuspubsub": "github.com/leasebus/leasebus/leasebuspubsub",
	"wmleasebus":     "github.com/leasebus/leasebus/wmleasebus",
	"sqstest":        "github.com/leasebus/leasebus/sqsserver/sqstest",
	"sqsserver":      "github.com/leasebus/leasebus/sqsserver",
	"sqsleasebus":    "github.com/leasebus/leasebus/sqsleasebus",
	"uuid":           "github.com/google/uuid",
	"pgleasebus":     "github.com/leasebus/leasebus/pgleasebus",
	"pgx":            "github.com/jackc/pgx/v5",
	"pgxpool":        "github.com/jackc/pgx/v5/pgxpool",
	"clock":          "github.com/benbjohnson/clock",
	"schedule":       "github.com/leasebus/leasebus/schedule",
	"outbox":         "github.com/leasebus/leasebus/outbox",
	"sql":            "database/sql",
	"nats":           "github.com/nats-io/nats.go",
	"pubsub":         "gocloud.dev/pubsub",
	"message":        "github.com/ThreeDotsLabs/watermill/message",
	"watermill":      "github.com/ThreeDotsLabs/watermill",
	"aws":            "github.com/aws/aws-sdk-go-v2/aws",
	"sqs":            "github.com/aws/aws-sdk-go-v2/service/sqs",
	"types":          "github.com/aws/aws-sdk-go-v2/service/sqs/types",
	"sns":            "github.com/aws/aws-sdk-go-v2/service/sns",
	"snstypes":       "github.com/aws/aws-sdk-go-v2/service/sns/types",
	"context":        "context", "time": "time", "fmt": "fmt", "errors": "errors", "http": "net/http",
	"testing": "testing", "synctest": "testing/synctest", "iter": "iter", "slog": "log/slog",
}

// given declares, at package level, the names the README fragments leave
// to their reader's program, each as a variable of its type (a function's
// too). A fragment may say other names, or other types for these, in an
// HTML comment on the line before its fence, which a rendered README
// does not show:
//
//	<!-- given: b *broker.Broker[[]byte]; logger watermill.LoggerAdapter -->
var given = [][2]string{
	{"ctx", "context.Context"}, {"dir", "string"}, {"url", "string"}, {"order", "Order"},
	{"maxItems", "int"}, {"id", "lease.ID"}, {"t", "*testing.T"}, {"mux", "*http.ServeMux"},
	{"opts", "[]broker.SubscribeOption"}, {"input", "[]Item"},
	{"b", "*broker.Broker[Order]"}, {"sub", "*broker.Subscription[Order]"},
	{"charge", "func(Order) error"}, {"isTransient", "func(error) bool"},
	{"fixed", "func(Order) (Order, bool)"}, {"ship", "func(context.Context, Order) error"},
	{"handle", "poller.Handler[Item]"}, {"handler", "poller.Handler[Order]"},
	{"requireUser", "func(http.Handler) http.Handler"},
	{"chunks", "func([]Item, int) iter.Seq[struct{ Items []Item; IDs []string }]"},
}

// types every fragment may use.
const preludeTypes = `
type Order struct{ ID int }
type Item struct{ Line string }
type Job struct{ Name string }
`

var preludeImports = []string{"broker", "context", "http", "iter", "lease", "poller", "queue", "testing"}

var (
	givenComment = regexp.MustCompile(`^\s*<!--\s*given:(.*)-->\s*$`)
	fileComment  = regexp.MustCompile(`^\s*<!--\s*file:(.*)-->\s*$`)
)

var qualifier = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.[A-Z]`)

type checker struct {
	fset *token.FileSet
	imp  types.Importer // one, so that each package is checked once
}

func newChecker() *checker {
	fset := token.NewFileSet()
	return &checker{fset: fset, imp: importer.ForCompiler(fset, "source", nil)}
}

// check type-checks one snippet and returns its errors, if any.
func (c *checker) check(s snippet) error {
	if s.file != "" {
		b, err := os.ReadFile(s.file)
		if err != nil {
			return err
		}
		if strings.TrimRight(string(b), "\n") != strings.TrimRight(s.text, "\n") {
			return fmt.Errorf("it is not %s as that file stands: copy one to the other", s.file)
		}
		return nil // the file itself is built, vetted and run
	}
	src := s.text
	whole := strings.HasPrefix(strings.TrimSpace(src), "package ")
	if !whole {
		src = wrap(src, s.given)
	}
	f, err := parser.ParseFile(c.fset, "snippet.go", src, parser.ParseComments)
	if err != nil {
		return fmt.Errorf("the snippet does not parse:\n%w", err)
	}
	var errs []string
	conf := types.Config{
		Importer: c.imp,
		Error: func(err error) {
			msg := err.(types.Error).Msg
			if !whole && (strings.Contains(msg, "declared and not used") || strings.Contains(msg, "imported and not used")) {
				return
			}
			errs = append(errs, err.Error())
		},
	}
	_, _ = conf.Check("snippet", c.fset, []*ast.File{f}, nil)
	if len(errs) > 0 {
		return fmt.Errorf("the snippet does not compile:\n%s", strings.Join(errs, "\n"))
	}
	return nil
}

// wrap makes a fragment a file: the package clause, the imports of the
// packages it names, the names it is given, and the fragment, its own
// import block dropped and its statements in a function body
// (declarations of functions or types stay at the top level).
func wrap(src string, more [][2]string) string {
	if i := strings.Index(src, "import ("); i >= 0 {
		if j := strings.Index(src[i:], "\n)"); j >= 0 {
			src = src[:i] + src[i+j+2:]
		}
	}
	names := map[string]string{}
	var order []string
	for _, g := range append(slices.Clone(given), more...) {
		if _, ok := names[g[0]]; !ok {
			order = append(order, g[0])
		}
		names[g[0]] = g[1]
	}
	need := slices.Clone(preludeImports)
	for _, text := range append(slices.Collect(maps.Values(names)), src) {
		for _, m := range qualifier.FindAllStringSubmatch(text, -1) {
			if imports[m[1]] != "" {
				need = append(need, m[1])
			}
		}
	}
	slices.Sort(need)
	var file strings.Builder
	file.WriteString("package snippet\n\nimport (\n")
	for _, name := range slices.Compact(need) {
		fmt.Fprintf(&file, "\t%s %q\n", name, imports[name])
	}
	file.WriteString(")\n" + preludeTypes + "\nvar (\n")
	for _, name := range order {
		fmt.Fprintf(&file, "\t%s %s\n", name, names[name])
	}
	file.WriteString(")\n\n")
	src = strings.ReplaceAll(src, "{ ... }", "{}")
	if topLevel(src) {
		file.WriteString(src + "\n")
	} else {
		file.WriteString("func _() {\n" + src + "\n}\n")
	}
	return file.String()
}

// topLevel reports whether a fragment declares functions or types (it is
// file-level code, not statements).
func topLevel(src string) bool {
	for _, l := range strings.Split(src, "\n") {
		if strings.HasPrefix(l, "func ") || strings.HasPrefix(l, "type ") {
			return true
		}
	}
	return false
}
