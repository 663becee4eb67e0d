package memory

import (
	"crypto/hmac"
	"crypto/sha256"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// tagSize is the length of a blind-index tag: 128 bits make collisions between
// an owner's terms negligible while keeping the index small.
const tagSize = 16

// stopwords are English words that carry no topic; indexing them would match
// every memory with every question.
var stopwords = map[string]bool{
	"a": true, "about": true, "am": true, "an": true, "and": true, "are": true, "as": true, "at": true,
	"be": true, "been": true, "but": true, "by": true, "can": true, "could": true, "did": true, "do": true,
	"does": true, "for": true, "from": true, "had": true, "has": true, "have": true, "how": true, "i": true,
	"i'm": true, "if": true, "in": true, "into": true, "is": true, "it": true, "its": true, "me": true,
	"my": true, "of": true, "on": true, "or": true, "our": true, "please": true, "s": true, "should": true,
	"so": true, "that": true, "the": true, "their": true, "them": true, "there": true, "they": true,
	"this": true, "to": true, "was": true, "we": true, "were": true, "what": true, "when": true,
	"where": true, "which": true, "who": true, "why": true, "will": true, "with": true, "would": true,
	"you": true, "your": true,
}

// isCJK reports whether r is written without spaces between words (Han, kana,
// Hangul), so it is indexed as character bigrams instead of words.
func isCJK(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
}

// token is a run of one script after normalisation.
type token struct {
	text string
	cjk  bool
}

// tokenize normalises text (NFKC, lower case; punctuation and symbols are
// separators) and splits it into word tokens and CJK runs.
func tokenize(text string) []token {
	text = strings.ToLower(norm.NFKC.String(text))
	var out []token
	var cur []rune
	curCJK := false
	flush := func() {
		if len(cur) > 0 {
			out = append(out, token{text: string(cur), cjk: curCJK})
			cur = cur[:0]
		}
	}
	for _, r := range text {
		switch {
		case isCJK(r):
			if !curCJK {
				flush()
			}
			curCJK = true
			cur = append(cur, r)
		case unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			if curCJK {
				flush()
			}
			curCJK = false
			cur = append(cur, r)
		default:
			flush()
		}
	}
	flush()
	return out
}

// stem folds the commonest English inflections so "dogs" meets "dog".
func stem(w string) string {
	switch {
	case len(w) > 4 && strings.HasSuffix(w, "ies"):
		return w[:len(w)-3] + "y"
	case len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is"):
		return w[:len(w)-1]
	}
	return w
}

// Terms returns the index terms of text in order, with repeats: English words
// (stemmed, stop words dropped) and CJK character bigrams (a lone CJK character
// stands for itself).
func Terms(text string) []string {
	var terms []string
	for _, t := range tokenize(text) {
		if !t.cjk {
			if !stopwords[t.text] {
				terms = append(terms, stem(t.text))
			}
			continue
		}
		r := []rune(t.text)
		if len(r) == 1 {
			terms = append(terms, t.text)
			continue
		}
		for i := 0; i+1 < len(r); i++ {
			terms = append(terms, string(r[i:i+2]))
		}
	}
	return terms
}

// blindTag is the blind-index tag of term under key.
func blindTag(key []byte, term string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(term))
	return m.Sum(nil)[:tagSize]
}
