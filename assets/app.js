// Atrium's own browser code: small, framework-free, no eval (the CSP is script-src 'self').
// Loaded with defer after htmx and its extensions.
(function () {
  'use strict';

  var NEAR_BOTTOM_PX = 80;

  // (0) Re-register the idiomorph htmx extension with a fixed isInlineSwap. The
  // vendored idiomorph-ext 0.8.0 claims every swap style it does not know (beforeend,
  // innerHTML, ...) as "inline", so with hx-ext="morph" on <body> an out-of-band
  // <div hx-swap-oob="beforeend:#messages"> was inserted with its wrapper instead of
  // its children (bigskysoftware/idiomorph#148). This version handles the morph
  // styles only, and never builds a config with Function() (the CSP forbids eval).
  //
  // Morphs keep what belongs to the reader: whether a <details> (a tool card, a
  // reasoning box, the task form) is open — idiomorph would otherwise reset `open` to
  // what the server rendered — and the value of the field being typed in. (Not with
  // idiomorph's ignoreActiveValue: that also freezes the children of whatever has
  // focus, e.g. a tool card's <summary> just clicked.)
  var morphCallbacks = {
    beforeAttributeUpdated: function (name, node) {
      if (name === 'open' && node instanceof HTMLDetailsElement) return false;
      if (name === 'value' && node === document.activeElement &&
          (node instanceof HTMLInputElement || node instanceof HTMLTextAreaElement)) return false;
    }
  };
  if (window.htmx && window.Idiomorph) {
    var morphStyle = function (style) {
      if (style === 'morph' || style === 'morph:outerHTML') return 'outerHTML';
      if (style === 'morph:innerHTML') return 'innerHTML';
      return null;
    };
    window.htmx.defineExtension('morph', {
      isInlineSwap: function (style) {
        return morphStyle(style) === 'outerHTML';
      },
      handleSwap: function (style, target, fragment) {
        var m = morphStyle(style);
        if (m) {
          return window.Idiomorph.morph(target, fragment.children, {
            morphStyle: m,
            callbacks: morphCallbacks
          });
        }
      }
    });
  }

  // (1) Composer: Enter sends, Shift+Enter adds a newline, IME composition is left alone.
  document.addEventListener('keydown', function (e) {
    var ta = e.target;
    if (!(ta instanceof HTMLTextAreaElement) || ta.name !== 'text' || !ta.form) return;
    if (e.key !== 'Enter' || e.shiftKey || e.altKey || e.ctrlKey || e.metaKey) return;
    if (e.isComposing || e.keyCode === 229) return;
    e.preventDefault();
    if (ta.value.trim() === '') return;
    checkSize(ta);
    ta.form.requestSubmit();
  });

  // Synthetic key events (DevTools, some IMEs) send the Enter "char" separately from
  // keydown; cancel it too so no stray newline lands in the emptied composer.
  document.addEventListener('keypress', function (e) {
    var ta = e.target;
    if (!(ta instanceof HTMLTextAreaElement) || ta.name !== 'text' || !ta.form) return;
    if (e.key === 'Enter' && !e.shiftKey && !e.altKey && !e.ctrlKey && !e.metaKey && !e.isComposing) e.preventDefault();
  });

  // The server enforces the size limit; this only explains it before sending.
  var encoder = new TextEncoder();
  function checkSize(ta) {
    var max = parseInt(ta.getAttribute('data-max-bytes') || '0', 10);
    if (!max) return;
    var n = encoder.encode(ta.value).length;
    ta.setCustomValidity(n > max ? 'This message is too long (' + n + ' bytes; the limit is ' + max + ').' : '');
  }
  document.addEventListener('input', function (e) {
    var ta = e.target;
    if (ta instanceof HTMLTextAreaElement && ta.name === 'text') checkSize(ta);
  });

  // (2) After htmx-ext-ws has sent the composer, clear it for the next message.
  document.addEventListener('htmx:wsAfterSend', function (e) {
    var form = e.target;
    if (!(form instanceof HTMLFormElement) || form.id !== 'composer') return;
    form.reset();
    var ta = form.querySelector('textarea[name=text]');
    if (ta) {
      ta.setCustomValidity('');
      ta.focus();
    }
    stickToBottom = true;
    scrollToBottom();
  });

  // (3) Copy buttons on code blocks.
  document.addEventListener('click', function (e) {
    var btn = e.target instanceof Element ? e.target.closest('[data-copy]') : null;
    if (!btn) return;
    var box = btn.parentElement;
    var pre = box ? box.querySelector('pre') : null;
    if (!pre) return;
    var text = pre.innerText;
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () {
        flash(btn, 'Copied');
      }, function () {
        flash(btn, legacyCopy(pre) ? 'Copied' : 'Copy failed');
      });
    } else {
      flash(btn, legacyCopy(pre) ? 'Copied' : 'Copy failed');
    }
  });
  // Plain-http installs have no navigator.clipboard; select the text and copy it.
  function legacyCopy(pre) {
    var sel = window.getSelection();
    var range = document.createRange();
    range.selectNodeContents(pre);
    sel.removeAllRanges();
    sel.addRange(range);
    var ok = false;
    try {
      ok = document.execCommand('copy');
    } catch (err) {
      ok = false;
    }
    sel.removeAllRanges();
    return ok;
  }
  function flash(btn, text) {
    btn.textContent = text;
    btn.classList.add('done');
    clearTimeout(btn._atriumTimer);
    btn._atriumTimer = setTimeout(function () {
      btn.textContent = 'Copy';
      btn.classList.remove('done');
    }, 1500);
  }

  // (4) Keep the conversation pinned to the bottom while a reply streams in, unless
  // the reader has scrolled up. #messages may be the scroller (wide screens) or the
  // page itself (phones), so both are checked.
  var stickToBottom = true;
  function scroller() {
    var m = document.getElementById('messages');
    if (m && m.scrollHeight > m.clientHeight + 1 && getComputedStyle(m).overflowY !== 'visible') return m;
    return document.scrollingElement || document.documentElement;
  }
  function nearBottom(el) {
    return el.scrollHeight - el.scrollTop - el.clientHeight < NEAR_BOTTOM_PX;
  }
  function scrollToBottom() {
    var el = scroller();
    el.scrollTop = el.scrollHeight;
  }
  document.addEventListener('scroll', function () {
    stickToBottom = nearBottom(scroller());
  }, true);

  // #chat lives as long as the page; #messages inside it may be morphed or replaced.
  function watchChat() {
    var chat = document.getElementById('chat');
    if (!chat) return;
    new MutationObserver(function () {
      if (stickToBottom) scrollToBottom();
    }).observe(chat, { childList: true, subtree: true, characterData: true });
  }

  // Closing the rename box once the rename went through.
  document.addEventListener('htmx:afterRequest', function (e) {
    var form = e.target;
    if (!(form instanceof HTMLFormElement) || !e.detail || !e.detail.successful) return;
    var box = form.closest('details');
    if (box) box.open = false;
  });

  // Plain (non-htmx) forms that ask first, e.g. deleting a provider.
  document.addEventListener('submit', function (e) {
    var form = e.target;
    if (!(form instanceof HTMLFormElement)) return;
    var q = form.getAttribute('data-confirm');
    if (q && !window.confirm(q)) e.preventDefault();
  }, true);

  // (5) The chat list is a drawer on narrow screens.
  document.addEventListener('click', function (e) {
    if (!(e.target instanceof Element)) return;
    var toggle = e.target.closest('[data-sidebar-toggle]');
    if (toggle) {
      setSidebar(!document.body.classList.contains('sidebar-open'));
      return;
    }
    if (document.body.classList.contains('sidebar-open') && !e.target.closest('#sidebar')) setSidebar(false);
  });
  document.addEventListener('keydown', function (e) {
    if (e.key === 'Escape' && document.body.classList.contains('sidebar-open')) setSidebar(false);
  });
  function setSidebar(open) {
    document.body.classList.toggle('sidebar-open', open);
    var t = document.querySelector('[data-sidebar-toggle]');
    if (t) t.setAttribute('aria-expanded', open ? 'true' : 'false');
  }

  // (6) The task panel and context meter: a right-hand column on wide screens, where
  // their <details> is always open (its summary is hidden by CSS), and a collapsed
  // "Task & context" box above the composer on narrow ones.
  var wide = window.matchMedia('(min-width: 1000px)');
  function placeSide() {
    var side = document.querySelector('details[data-side]');
    if (side) side.open = wide.matches;
  }
  if (wide.addEventListener) wide.addEventListener('change', placeSide);

  function start() {
    placeSide();
    watchChat();
    if (document.getElementById('messages')) scrollToBottom();
    var ta = document.querySelector('#composer textarea[name=text]');
    if (ta && window.matchMedia('(min-width: 721px)').matches) ta.focus();
  }
  if (document.readyState === 'loading') {
    document.addEventListener('DOMContentLoaded', start);
  } else {
    start();
  }
})();
