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
	// Pieces of contractions (don't, what's, I'm, we'll) and question fillers
	// ("how often", "any", "how many") that match unrelated memories.
	"t": true, "m": true, "d": true, "ll": true, "re": true, "ve": true,
	"any": true, "many": true, "much": true, "often": true, "some": true, "very": true, "also": true, "just": true, "ever": true,
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

// stem folds the commonest English inflections so a question meets its memory
// whatever the form: cats/cat, allergies/allergy, preferred/prefer,
// running/run, saving/save, tomatoes/tomato, kilometres/kilometers. It is a
// small Porter-like step 1, not a dictionary: what matters is that both sides
// fold to the same key, not that the key is a real word.
func stem(w string) string {
	if len(w) <= 3 || !isASCIIWord(w) {
		return w
	}
	switch {
	case strings.HasSuffix(w, "ies") || strings.HasSuffix(w, "ied"):
		if len(w) > 4 {
			w = w[:len(w)-3] + "y"
		}
	case strings.HasSuffix(w, "sses"):
		w = w[:len(w)-2]
	case strings.HasSuffix(w, "ches") || strings.HasSuffix(w, "shes") || strings.HasSuffix(w, "xes"):
		w = w[:len(w)-2]
	case strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us"):
		w = w[:len(w)-1]
	}
	// Then -ing/-ed, also after a plural (meetings → meeting → meet).
	switch {
	case strings.HasSuffix(w, "ing") && hasVowel(w[:len(w)-3]) && len(w) > 5:
		w = undouble(w[:len(w)-3])
	case strings.HasSuffix(w, "ed") && !strings.HasSuffix(w, "eed") && hasVowel(w[:len(w)-2]) && len(w) > 4:
		w = undouble(w[:len(w)-2])
	}
	// tomatoes → tomatoe → tomato, but shoe stays shoe.
	if len(w) >= 6 && strings.HasSuffix(w, "oe") {
		w = w[:len(w)-1]
	}
	// British -tre spells the same word as -ter (kilometre, centre).
	if len(w) > 4 && strings.HasSuffix(w, "tre") {
		w = w[:len(w)-2] + "er"
	}
	// A silent final e: save/saving/saved all fold to "sav".
	if len(w) > 3 && strings.HasSuffix(w, "e") && !strings.HasSuffix(w, "ee") {
		w = w[:len(w)-1]
	}
	return w
}

// undouble drops a doubled final consonant left by -ing/-ed (running,
// preferred), keeping ll, ss and zz, which are usually part of the word.
func undouble(w string) string {
	n := len(w)
	if n >= 3 && w[n-1] == w[n-2] && !strings.ContainsRune("aeiouylsz", rune(w[n-1])) {
		return w[:n-1]
	}
	return w
}

func hasVowel(w string) bool { return strings.ContainsAny(w, "aeiouy") }

// isASCIIWord reports whether w is all ASCII letters: the rules are English
// ones, and must not cut other languages' words or numbers like "5ks".
func isASCIIWord(w string) bool {
	for i := 0; i < len(w); i++ {
		if c := w[i]; c < 'a' || c > 'z' {
			return false
		}
	}
	return true
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
