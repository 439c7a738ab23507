// promqlnames parses PromQL expressions with Prometheus' own parser and names the metrics each
// one selects. It backs the tests that check deploy/grafana's dashboard and deploy/prometheus'
// rules against the extender's /metrics (tests/deploy/promql.py).
//
// Input (stdin): a JSON array of expression strings.
// Output (stdout): a JSON array, one object per expression, in input order:
//
//	{"expr": "...", "metrics": ["name", ...]}   sorted, distinct metric names it selects
//	{"expr": "...", "error": "..."}             the parser's error
//
// A selector without a metric name (`{job="x"}`) or with a non-equality `__name__` matcher is
// reported as an error too: its metrics cannot be checked by name.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

type result struct {
	Expr    string   `json:"expr"`
	Metrics []string `json:"metrics,omitempty"`
	Error   string   `json:"error,omitempty"`
}

func names(p parser.Parser, input string) ([]string, error) {
	expr, err := p.ParseExpr(input)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var problem error
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		selector, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := selector.Name
		for _, m := range selector.LabelMatchers {
			if m.Name == labels.MetricName && name == "" {
				if m.Type != labels.MatchEqual {
					problem = fmt.Errorf("selector %s does not name one metric", selector)
				}
				name = m.Value
			}
		}
		if name == "" && problem == nil {
			problem = fmt.Errorf("selector %s names no metric", selector)
		}
		seen[name] = true
		return nil
	})
	if problem != nil {
		return nil, problem
	}
	out := make([]string, 0, len(seen))
	for name := range seen {
		out = append(out, name)
	}
	sort.Strings(out)
	return out, nil
}

func main() {
	var inputs []string
	if err := json.NewDecoder(os.Stdin).Decode(&inputs); err != nil {
		fmt.Fprintf(os.Stderr, "promqlnames: stdin must be a JSON array of strings: %v\n", err)
		os.Exit(2)
	}
	p := parser.NewParser(parser.Options{})
	results := make([]result, 0, len(inputs))
	for _, input := range inputs {
		metrics, err := names(p, input)
		if err != nil {
			results = append(results, result{Expr: input, Error: err.Error()})
		} else {
			results = append(results, result{Expr: input, Metrics: metrics})
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(results); err != nil {
		fmt.Fprintf(os.Stderr, "promqlnames: %v\n", err)
		os.Exit(1)
	}
}
