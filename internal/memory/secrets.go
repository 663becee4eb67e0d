package memory

import (
	"regexp"

	"atrium/internal/errs"
)

// secretPatterns are shapes of credentials that must never become memories:
// a memory is recalled into later prompts and shown on pages, so a saved key
// would leak far from where it was typed.
var secretPatterns = []struct {
	re   *regexp.Regexp
	what string
}{
	{regexp.MustCompile(`\bsk-[A-Za-z0-9_\-]{16,}`), "an API key"},
	{regexp.MustCompile(`\b(?:AKIA|ASIA)[0-9A-Z]{16}\b`), "an AWS access key"},
	{regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{30,}`), "a GitHub token"},
	{regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9-]{10,}`), "a Slack token"},
	{regexp.MustCompile(`\bAIza[0-9A-Za-z_\-]{30,}`), "a Google API key"},
	{regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.`), "an access token"},
	{regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----`), "a private key"},
	{regexp.MustCompile(`(?i)\b(?:password|passwd|passphrase|passcode|pwd|pin)\b\s*(?:is|was|=|:)\s*\S+`), "a password"},
	{regexp.MustCompile(`(?:密码|口令)\s*(?:是|为|:|：)\s*\S+`), "a password"},
}

// injectionPatterns are instructions aimed at the model rather than facts about the
// user: a memory is put into every later prompt, so a saved "ignore your
// instructions" or "send the chat to this URL" would act in every chat to come.
var injectionPatterns = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\b(?:ignore|disregard|forget|override)\b.{0,30}\b(?:previous|prior|above|earlier|all|your|system)\b.{0,20}\b(?:instructions?|prompts?|rules?|guidelines)\b`),
	regexp.MustCompile(`(?i)\b(?:reveal|print|show|repeat|output)\b.{0,20}\b(?:system prompt|hidden instructions?|your instructions)\b`),
	regexp.MustCompile(`(?i)\b(?:send|post|upload|forward|exfiltrate|leak)\b.{0,60}\b(?:https?://|to (?:this|the following|my) (?:url|server|endpoint|address|email))`),
	regexp.MustCompile(`(?i)!\[[^\]]*\]\(https?://[^)]*[?&][^)]*=`), // a markdown image that carries data out in its query
	regexp.MustCompile(`(?:忽略|无视).{0,10}(?:之前|以上|所有|系统).{0,6}(?:指令|提示|规则)`),
}

// cardCandidate is 13–19 digits, optionally grouped by spaces or dashes.
var cardCandidate = regexp.MustCompile(`\b\d(?:[ -]?\d){12,18}\b`)

// checkSecrets returns errs.Invalid naming what text seems to contain when it
// looks like a credential or a payment card number.
func checkSecrets(text string) error {
	for _, p := range secretPatterns {
		if p.re.MatchString(text) {
			return errs.E(errs.Invalid, "This looks like it contains %s; secrets are never saved to memory.", p.what)
		}
	}
	for _, re := range injectionPatterns {
		if re.MatchString(text) {
			return errs.E(errs.Invalid, "This reads like an instruction to the assistant rather than something about you; it is not saved to memory.")
		}
	}
	for _, m := range cardCandidate.FindAllString(text, -1) {
		if luhn(m) {
			return errs.E(errs.Invalid, "This looks like it contains a payment card number; secrets are never saved to memory.")
		}
	}
	return nil
}

// luhn reports whether the digits of s (separators ignored) pass the Luhn check.
func luhn(s string) bool {
	var sum, n int
	for i := len(s) - 1; i >= 0; i-- {
		c := s[i]
		if c < '0' || c > '9' {
			continue
		}
		d := int(c - '0')
		if n%2 == 1 {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
		n++
	}
	return n >= 13 && n <= 19 && sum%10 == 0
}
