package llmtest

import (
	"regexp"
	"slices"
	"strings"
)

// FoldPrefix starts the system prompt of Atrium's summary folds (contextwin).
const FoldPrefix = "You maintain the rolling summary"

// IsFold reports whether req is a summary fold rather than a chat reply.
func IsFold(req ChatRequest) bool {
	return len(req.Messages) > 0 && strings.HasPrefix(req.Messages[0].Content, FoldPrefix)
}

// FaithfulModel is a model for small-window tests: it answers chat requests with
// reply, and summary folds with every match of facts found in the fold prompt (the old
// summary and the new turns), one a line, so that a fact can only go missing if Atrium
// never showed it to the summarizer.
func FaithfulModel(facts *regexp.Regexp, reply string) func(ChatRequest) Reply {
	return func(req ChatRequest) Reply {
		if !IsFold(req) {
			return Reply{Text: []string{reply}}
		}
		var found []string
		for _, m := range req.Messages[1:] {
			for _, f := range facts.FindAllString(m.Content, -1) {
				if !slices.Contains(found, f) {
					found = append(found, f)
				}
			}
		}
		if len(found) == 0 {
			found = []string{"Nothing to keep."}
		}
		return Reply{Text: []string{strings.Join(found, ".\n") + "."}}
	}
}
