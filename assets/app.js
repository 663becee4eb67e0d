// Atrium's own browser code: small, framework-free, no eval (the CSP is script-src 'self').
// Loaded with defer after htmx and its extensions.
(function () {
  'use strict';

  var NEAR_BOTTOM_PX = 80;

  // A settings page shows the MCP servers it was rendered with. A live frame for a
  // server it does not show (added in another tab, or by the form whose redirect is
  // still loading) has no card to morph: drop it rather than let htmx report
  // oobErrorNoTarget; a reload shows the new server.
  htmx.defineExtension('mcp-cards', {
    transformResponse: function (text) {
      var t = document.createElement('template');
      t.innerHTML = text;
      var dropped = false;
      Array.prototype.slice.call(t.content.children).forEach(function (el) {
        if (el.classList.contains('mcp-server') && el.hasAttribute('hx-swap-oob') && !document.getElementById(el.id)) {
          el.remove();
          dropped = true;
        }
      });
      return dropped ? t.innerHTML : text;
    }
  });

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
    if (pickFirstPrompt(ta)) return;
    if (ta.value.trim() === '' && ta.required) return; // not required: files go alone
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

  // (2) The composer keeps its text until the server accepted the message: each send
  // carries a nonce, and the server answers it (#send-result, with the reason for a
  // refusal in #notice). Only then is the composer cleared, and only if it still holds
  // what was sent. One send is in flight at a time, so a second Enter cannot send the
  // same text twice.
  var pendingSend = null; // {nonce, text, sent}
  var nonceCount = 0;
  function composerText() {
    return document.querySelector('#composer textarea[name=text]');
  }
  document.addEventListener('htmx:wsConfigSend', function (e) {
    var form = e.target;
    if (!(form instanceof HTMLFormElement) || form.id !== 'composer') return;
    var trigger = e.detail.triggeringEvent;
    if (pendingSend || uploading > 0) {
      e.preventDefault();
      if (trigger) trigger.preventDefault(); // not a native submit either
      if (!pendingSend) showNotice('Wait for the attached files to finish uploading, then send.');
      return;
    }
    var ta = composerText();
    nonceCount++;
    var nonce = 'n' + Date.now().toString(36) + '-' + nonceCount + '-' + Math.floor(Math.random() * 1e9).toString(36);
    e.detail.parameters.nonce = nonce;
    pendingSend = { nonce: nonce, text: ta ? ta.value : '', sent: false };
    form.setAttribute('aria-busy', 'true');
  });
  document.addEventListener('htmx:wsAfterSend', function (e) {
    var form = e.target;
    if (!(form instanceof HTMLFormElement) || form.id !== 'composer') return;
    if (pendingSend) pendingSend.sent = true;
    closePromptMenu();
  });
  function endPendingSend() {
    pendingSend = null;
    var form = document.getElementById('composer');
    if (form) form.removeAttribute('aria-busy');
  }
  function takeSendResult() {
    var r = document.getElementById('send-result');
    if (!r || !pendingSend || r.getAttribute('data-nonce') !== pendingSend.nonce) return;
    var sent = pendingSend;
    endPendingSend();
    var form = document.getElementById('composer');
    var ta = composerText();
    if (r.getAttribute('data-accepted') !== 'true') {
      if (ta) ta.focus(); // the text is still there; #notice says why
      return;
    }
    if (form && ta && ta.value === sent.text) {
      form.reset();
      ta.setCustomValidity('');
      ta.focus();
    }
    clearAttachments();
    closePromptMenu();
    stickToBottom = true;
    scrollToBottom();
  }
  // A socket that closes after the message went out will never answer it: let the
  // reader send again (the text is still in the composer).
  document.addEventListener('htmx:wsClose', function () {
    if (!pendingSend || !pendingSend.sent) return; // still queued: sent on reconnect
    endPendingSend();
    var n = document.getElementById('notice');
    if (n && n.textContent.trim() === '') n.textContent = 'The connection dropped before Atrium confirmed your message. It is still in the composer: send it again once reconnected.';
  });
  document.addEventListener('htmx:wsAfterMessage', function () {
    takeSendResult();
  });

  // A message's inline editor starts from the message's text when it opens; Cancel
  // closes it and drops what was typed.
  document.addEventListener('toggle', function (e) {
    var box = e.target;
    if (!(box instanceof HTMLDetailsElement) || !box.classList.contains('msg-edit') || !box.open) return;
    var ta = box.querySelector('textarea');
    var article = box.closest('article');
    var text = article ? article.querySelector(':scope > .text') : null;
    if (ta && text && ta.value === '') ta.value = text.textContent;
    if (ta) ta.focus();
  }, true);
  document.addEventListener('click', function (e) {
    if (!(e.target instanceof Element)) return;
    var cancel = e.target.closest('[data-edit-cancel]');
    if (!cancel) return;
    var box = cancel.closest('details');
    var ta = box ? box.querySelector('textarea') : null;
    if (ta) ta.value = '';
    if (box) box.open = false;
  });

  // (3) Copy buttons on code blocks, and on each message: its source (a user's text,
  // a reply's markdown from data-source), not the rendered HTML.
  document.addEventListener('click', function (e) {
    if (!(e.target instanceof Element)) return;
    var msgBtn = e.target.closest('[data-copy-message]');
    if (msgBtn) {
      var article = msgBtn.closest('article');
      var own = article ? article.querySelector(':scope > .text') : null;
      var source = msgBtn.hasAttribute('data-source') ? msgBtn.getAttribute('data-source') : (own ? own.textContent : '');
      copyText(source, msgBtn);
      return;
    }
    var btn = e.target.closest('[data-copy]');
    if (!btn) return;
    var box = btn.parentElement;
    var pre = box ? box.querySelector('pre') : null;
    if (!pre) return;
    copyText(pre.innerText, btn);
  });
  function copyText(text, btn) {
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () {
        flash(btn, 'Copied');
      }, function () {
        flash(btn, legacyCopy(text) ? 'Copied' : 'Copy failed');
      });
    } else {
      flash(btn, legacyCopy(text) ? 'Copied' : 'Copy failed');
    }
  }
  // Plain-http installs have no navigator.clipboard; copy from a scratch textarea.
  function legacyCopy(text) {
    var ta = document.createElement('textarea');
    ta.value = text;
    ta.setAttribute('readonly', '');
    ta.className = 'copy-scratch';
    document.body.appendChild(ta);
    ta.select();
    var ok = false;
    try {
      ok = document.execCommand('copy');
    } catch (err) {
      ok = false;
    }
    ta.remove();
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

  // "Load older" puts messages above the ones being read: keep the first of those where
  // it was on screen (browsers do not anchor a scroller at offset 0, so it would jump to
  // the oldest message loaded).
  var olderAnchor = null;
  document.addEventListener('htmx:beforeSwap', function (e) {
    var target = e.detail && e.detail.target;
    if (!(target instanceof Element) || target.id !== 'older') return;
    var first = target.nextElementSibling;
    if (first) olderAnchor = { el: first, top: first.getBoundingClientRect().top };
  });
  document.addEventListener('htmx:afterSwap', function () {
    if (!olderAnchor) return;
    var a = olderAnchor;
    olderAnchor = null;
    if (!a.el.isConnected) return;
    scroller().scrollTop += a.el.getBoundingClientRect().top - a.top;
    stickToBottom = nearBottom(scroller());
  });

  // The tab's title follows a rename (here or in another tab): the heading carries it.
  function syncTitle() {
    var h = document.getElementById('session-title');
    var t = h && h.getAttribute('data-page-title');
    if (t && document.title !== t) document.title = t;
  }

  // Times are rendered in UTC ("2006-01-02 15:04 UTC", which stays without JS); show
  // them in the reader's zone, the full date and zone on hover.
  function pad(n) {
    return (n < 10 ? '0' : '') + n;
  }
  function utcText(d) {
    return d.getUTCFullYear() + '-' + pad(d.getUTCMonth() + 1) + '-' + pad(d.getUTCDate()) + ' ' +
      pad(d.getUTCHours()) + ':' + pad(d.getUTCMinutes()) + ' UTC';
  }
  function localText(d) {
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' +
      pad(d.getHours()) + ':' + pad(d.getMinutes());
  }
  var fullTime = new Intl.DateTimeFormat(undefined, { dateStyle: 'full', timeStyle: 'long' });
  function localiseTimes(root) {
    var times = (root || document).querySelectorAll('time[datetime]');
    for (var i = 0; i < times.length; i++) {
      var d = new Date(times[i].getAttribute('datetime'));
      if (isNaN(d.getTime())) continue;
      var utc = utcText(d);
      var text = times[i].textContent;
      if (text.indexOf(utc) < 0) continue; // already local, or a date only
      times[i].textContent = text.replace(utc, localText(d));
      times[i].title = fullTime.format(d);
    }
  }

  // MCP: the Resources button and the "/" menu are there only while a ready server
  // offers resources or prompts; #mcp-indicator (morphed by MCP frames) says so.
  function mcpOffers(what) {
    var ind = document.getElementById('mcp-indicator');
    return !!ind && parseInt(ind.getAttribute('data-' + what) || '0', 10) > 0;
  }
  function syncMCP() {
    var btn = document.querySelector('[data-testid=resources-button]');
    if (btn) btn.hidden = !mcpOffers('resources');
    if (btn && btn.hidden) setPanel('resources-panel', false);
    if (!mcpOffers('prompts')) closePromptMenu();
  }

  // After any swap, over HTTP or the websocket.
  function afterSwaps() {
    syncTitle();
    localiseTimes();
    syncMCP();
  }
  document.addEventListener('htmx:afterSettle', afterSwaps);
  document.addEventListener('htmx:wsAfterMessage', afterSwaps);

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

  // (6) The task panel and context meter ("Task & context"): collapsed by default so
  // the chat gets the width; the reader's choice is remembered in this browser. Wide
  // screens show it opened as a right-hand column (CSS), narrow ones above the composer.
  var SIDE_KEY = 'atrium.side-open';
  function placeSide() {
    var side = document.querySelector('details[data-side]');
    if (!side) return;
    var open = false;
    try { open = window.localStorage.getItem(SIDE_KEY) === '1'; } catch (_) { /* storage off: stay collapsed */ }
    side.open = open;
  }
  // "toggle" does not bubble: listen in the capture phase.
  document.addEventListener('toggle', function (e) {
    var d = e.target;
    if (!(d instanceof HTMLDetailsElement) || !d.hasAttribute('data-side')) return;
    try { window.localStorage.setItem(SIDE_KEY, d.open ? '1' : '0'); } catch (_) { /* not remembered */ }
  }, true);

  // (6b) Keyboard shortcuts, listed in the "?" dialog (#keys-help, in the layout).
  // Single keys, so never while the reader types in a field or with a modifier held.
  function typingIn(el) {
    return el instanceof Element && !!el.closest('input, textarea, select, [contenteditable]:not([contenteditable=false])');
  }
  function csrfToken() {
    try { return JSON.parse(document.body.getAttribute('hx-headers') || '{}')['X-CSRF-Token'] || ''; } catch (_) { return ''; }
  }
  function newChat() {
    var b = document.querySelector('[data-testid=new-chat]');
    if (b) { b.click(); return; }
    // Pages without the chat list (settings): post the same form by hand.
    var f = document.createElement('form');
    f.method = 'post';
    f.action = '/sessions';
    var t = document.createElement('input');
    t.type = 'hidden';
    t.name = '_csrf';
    t.value = csrfToken();
    f.appendChild(t);
    document.body.appendChild(f);
    f.submit();
  }
  var shortcuts = {
    '?': function () { document.getElementById('keys-help').showModal(); },
    'n': newChat,
    'c': function () {
      var ta = composerText();
      if (!ta) return false;
      ta.focus();
    },
    '/': function () {
      var box = document.getElementById('chat-search');
      if (!box) return false;
      if (window.matchMedia('(max-width: 720px)').matches) setSidebar(true);
      box.focus();
    },
    's': function () {
      var stop = document.querySelector('[data-testid=stop]');
      if (!stop) return false;
      stop.click();
    }
  };
  document.addEventListener('click', function (e) {
    if (e.target instanceof Element && e.target.closest('[data-keys-help]')) shortcuts['?']();
  });
  document.addEventListener('keydown', function (e) {
    if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey || e.isComposing) return;
    var help = document.getElementById('keys-help');
    if (!help || help.open || typingIn(e.target)) return;
    var act = shortcuts[e.key];
    if (act && act() !== false) {
      e.preventDefault();
      swallowKey = e.key;
    }
  });
  // Some synthetic key events send the character apart from keydown: drop it, or the
  // "/" that focused the search would land in it.
  var swallowKey = '';
  document.addEventListener('keypress', function (e) {
    if (swallowKey && e.key === swallowKey) e.preventDefault();
    swallowKey = '';
  }, true);
  document.addEventListener('keyup', function () { swallowKey = ''; }, true);

  // (7) MCP resources: the Resources button loads #resources-panel (htmx); "Attach"
  // adds a chip with a hidden "attach" field (<server>\n<uri>) to form#composer, which
  // htmx-ext-ws sends with the message (one value as a string, several as an array).
  function showNotice(text) {
    var n = document.getElementById('notice');
    if (n) n.textContent = text;
  }
  function clearAttachments() {
    var box = document.getElementById('attachments');
    while (box && box.firstChild) box.removeChild(box.firstChild);
    attachmentsChanged();
  }
  // A chip in #attachments: its label, a remove button, and the hidden field that the
  // send carries (name "attach" for an MCP resource, "files" for an uploaded file).
  function makeChip(label, title, field, value) {
    var chip = document.createElement('span');
    chip.className = 'chip';
    chip.setAttribute('data-testid', 'attachment-chip');
    chip.title = title;
    var name = document.createElement('span');
    name.className = 'chip-label';
    name.textContent = label;
    var rm = document.createElement('button');
    rm.type = 'button';
    rm.className = 'link';
    rm.setAttribute('data-remove-attachment', '');
    rm.setAttribute('aria-label', 'Remove ' + label);
    rm.textContent = '×';
    chip.appendChild(name);
    chip.appendChild(rm);
    if (field) {
      var input = document.createElement('input');
      input.type = 'hidden';
      input.name = field;
      input.value = value;
      chip.appendChild(input);
    }
    return chip;
  }
  function addAttachment(value, label) {
    var box = document.getElementById('attachments');
    if (!box) return;
    var inputs = box.querySelectorAll('input[name=attach]');
    for (var i = 0; i < inputs.length; i++) {
      if (inputs[i].value === value) return;
    }
    box.appendChild(makeChip(label, value.replace('\n', ' '), 'attach', value));
    attachmentsChanged();
  }

  // (7b) Files: the Attach button (a file picker), a drop on the composer, or a paste
  // of an image upload each file at once (POST data-upload-url, multipart, with the
  // CSRF header); its chip then carries the uploaded id as a "files" field that the
  // send names. Sending waits until every upload has finished. An image for a model
  // that does not take images is refused here already (the server checks again).
  var uploading = 0;
  var IMAGE_TYPES = { 'image/png': 1, 'image/jpeg': 1, 'image/gif': 1, 'image/webp': 1 };
  function fileSizeText(n) {
    if (n < 1000) return n + ' B';
    if (n < 1e6) return (n / 1000).toFixed(1) + ' KB';
    return (n / 1e6).toFixed(1) + ' MB';
  }
  function modelTakesImages() {
    var sel = document.querySelector('[data-testid=model-select]');
    var opt = sel && sel.selectedOptions && sel.selectedOptions[0];
    return !!(opt && opt.hasAttribute('data-vision'));
  }
  // The message may be empty when files go with it.
  function attachmentsChanged() {
    var ta = composerText();
    var box = document.getElementById('attachments');
    if (ta) ta.required = !(box && box.querySelector('input[name=files]'));
  }
  function uploadFiles(list) {
    var form = document.getElementById('composer');
    var box = document.getElementById('attachments');
    if (!form || !box || !list) return;
    Array.prototype.forEach.call(list, function (file) {
      if (IMAGE_TYPES[file.type] && !modelTakesImages()) {
        showNotice(file.name + ': this chat\'s model does not take images. Pick a model that does in the header (an admin marks one with "vision" in Settings → Providers).');
        return;
      }
      var chip = makeChip(file.name + ' · uploading…', file.name, '', '');
      chip.setAttribute('aria-busy', 'true');
      box.appendChild(chip);
      uploading++;
      var body = new FormData();
      body.append('file', file, file.name);
      fetch(form.getAttribute('data-upload-url'), {
        method: 'POST', body: body, credentials: 'same-origin',
        headers: { 'X-CSRF-Token': csrfToken(), 'HX-Request': 'true' }
      }).then(function (res) {
        if (!res.ok) {
          return res.text().then(function (t) {
            throw new Error(t && t.length < 500 && t.charAt(0) !== '<' ? t : 'The upload failed (HTTP ' + res.status + ').');
          });
        }
        return res.json();
      }).then(function (f) {
        var done = makeChip(f.name + ' · ' + fileSizeText(f.size), f.name + ' (about ' + f.tokens + ' tokens)', 'files', f.id);
        done.setAttribute('data-file-id', f.id);
        done.setAttribute('data-testid', 'file-attachment-chip');
        if (chip.parentNode) chip.parentNode.replaceChild(done, chip);
      }, function (err) {
        chip.remove();
        showNotice(err.message || 'The upload failed.');
      }).then(function () {
        uploading--;
        attachmentsChanged();
      });
    });
  }
  document.addEventListener('change', function (e) {
    var input = e.target;
    if (!(input instanceof HTMLInputElement) || input.id !== 'file-input') return;
    uploadFiles(input.files);
    input.value = '';
  });
  document.addEventListener('dragover', function (e) {
    var form = e.target instanceof Element && e.target.closest('#composer');
    if (!form || !e.dataTransfer || Array.prototype.indexOf.call(e.dataTransfer.types, 'Files') < 0) return;
    e.preventDefault();
    form.classList.add('drop-target');
  });
  document.addEventListener('dragleave', function (e) {
    var form = e.target instanceof Element && e.target.closest('#composer');
    if (form) form.classList.remove('drop-target');
  });
  document.addEventListener('drop', function (e) {
    var form = e.target instanceof Element && e.target.closest('#composer');
    if (!form || !e.dataTransfer || !e.dataTransfer.files.length) return;
    e.preventDefault();
    form.classList.remove('drop-target');
    uploadFiles(e.dataTransfer.files);
  });
  document.addEventListener('paste', function (e) {
    var ta = e.target;
    if (!(ta instanceof HTMLTextAreaElement) || !ta.form || ta.form.id !== 'composer') return;
    var files = e.clipboardData && e.clipboardData.files;
    if (!files || !files.length) return; // plain text pastes as usual
    e.preventDefault();
    uploadFiles(files);
  });
  function setPanel(id, open) {
    var p = document.getElementById(id);
    if (p) p.hidden = !open;
  }
  document.addEventListener('click', function (e) {
    if (!(e.target instanceof Element)) return;
    var attach = e.target.closest('[data-attach]');
    if (attach) {
      addAttachment(attach.getAttribute('data-attach'), attach.getAttribute('data-label') || '');
      attach.textContent = 'Attached';
      return;
    }
    var rm = e.target.closest('[data-remove-attachment]');
    if (rm && rm.parentElement) {
      var id = rm.parentElement.getAttribute('data-file-id');
      rm.parentElement.remove();
      attachmentsChanged();
      if (id) { // an unsent upload: delete it now rather than when it expires
        fetch('/files/' + encodeURIComponent(id) + '/delete', {
          method: 'POST', credentials: 'same-origin', headers: { 'X-CSRF-Token': csrfToken(), 'HX-Request': 'true' }
        }).catch(function () { /* it expires after a day anyway */ });
      }
      return;
    }
    if (e.target.closest('[data-attach-file]')) {
      var picker = document.getElementById('file-input');
      if (picker) picker.click();
      return;
    }
    if (e.target.closest('[data-close-resources]')) {
      setPanel('resources-panel', false);
      return;
    }
    var pick = e.target.closest('[data-prompt-pick]');
    if (pick) choosePrompt(pick.closest('.prompt-item'));
  });
  document.addEventListener('htmx:beforeRequest', function (e) {
    var elt = e.detail && e.detail.elt;
    var panel = document.getElementById('resources-panel');
    // A second click on the Resources button closes the panel instead of reloading it.
    if (elt instanceof Element && elt.matches('[data-testid=resources-button]') && panel && !panel.hidden) {
      e.preventDefault();
      panel.hidden = true;
    }
  });
  document.addEventListener('htmx:afterSwap', function (e) {
    var target = e.detail && e.detail.target;
    if (target instanceof Element && target.id === 'resources-panel') setPanel('resources-panel', true);
  });
  document.addEventListener('htmx:afterRequest', function (e) {
    var elt = e.detail && e.detail.elt;
    if (!(elt instanceof Element) || !e.detail) return;
    var mcp = elt.matches('[data-prompt-form], [data-testid=resources-button]');
    if (!mcp) return;
    var xhr = e.detail.xhr;
    if (!e.detail.successful) {
      showNotice((xhr && xhr.responseText) || 'The request failed.');
      return;
    }
    if (elt.matches('[data-prompt-form]')) {
      var ta = document.querySelector('#composer textarea[name=text]');
      if (ta && xhr) {
        ta.value = xhr.responseText;
        checkSize(ta);
        ta.focus();
      }
      closePromptMenu();
      showNotice('');
    }
  });

  // (8) MCP prompts as slash commands: "/" at the start of the composer opens
  // #prompt-menu (loaded from data-prompts-url), filtered by what follows; choosing
  // one shows its argument form, whose answer app.js puts into the composer.
  var promptQuery = /^\/(\S*)$/;
  function promptMenu() {
    return document.getElementById('prompt-menu');
  }
  function closePromptMenu() {
    var m = promptMenu();
    if (m) m.hidden = true;
  }
  function filterPrompts(q) {
    var m = promptMenu();
    if (!m) return;
    var items = m.querySelectorAll('.prompt-item');
    for (var i = 0; i < items.length; i++) {
      var label = (items[i].getAttribute('data-label') || '').slice(1); // server:name
      var name = label.slice(label.indexOf(':') + 1);
      items[i].hidden = q !== '' && label.indexOf(q) !== 0 && name.indexOf(q) !== 0;
    }
  }
  function openPromptMenu(q) {
    var m = promptMenu();
    if (!m || !mcpOffers('prompts')) return;
    if (!m.hidden) {
      filterPrompts(q);
      return;
    }
    m.hidden = false;
    var url = m.getAttribute('data-prompts-url');
    if (url && window.htmx) {
      window.htmx.ajax('GET', url, { target: m, swap: 'innerHTML' }).then(function () {
        var ta = document.querySelector('#composer textarea[name=text]');
        var match = ta && promptQuery.exec(ta.value);
        filterPrompts(match ? match[1] : '');
      });
    }
  }
  function choosePrompt(item) {
    var m = promptMenu();
    if (!item || !m) return;
    var forms = m.querySelectorAll('form[data-prompt-form]');
    for (var i = 0; i < forms.length; i++) forms[i].hidden = true;
    var form = item.querySelector('form[data-prompt-form]');
    if (!form) return;
    if (!form.querySelector('input[data-arg]')) {
      form.requestSubmit();
      return;
    }
    form.hidden = false;
    var first = form.querySelector('input[data-arg]');
    if (first) first.focus();
  }
  // Enter in the composer while the menu shows: choose the first matching prompt.
  function pickFirstPrompt(ta) {
    var m = promptMenu();
    if (!m || m.hidden || !promptQuery.test(ta.value)) return false;
    var items = m.querySelectorAll('.prompt-item');
    for (var i = 0; i < items.length; i++) {
      if (!items[i].hidden) {
        choosePrompt(items[i]);
        return true;
      }
    }
    return false;
  }
  document.addEventListener('input', function (e) {
    var ta = e.target;
    if (!(ta instanceof HTMLTextAreaElement) || ta.name !== 'text' || !ta.form || ta.form.id !== 'composer') return;
    var match = promptQuery.exec(ta.value);
    if (match) {
      openPromptMenu(match[1]);
    } else {
      closePromptMenu();
    }
  });
  document.addEventListener('keydown', function (e) {
    if (e.key !== 'Escape') return;
    var m = promptMenu();
    if (m && !m.hidden) closePromptMenu();
    setPanel('resources-panel', false);
  });

  // An htmx request that fails (a 4xx/5xx answer, which htmx does not swap, or no answer
  // at all) says why: the server answers such requests with one line of plain text. It
  // goes into the chat's #notice, or a toast on other pages, as text, never as HTML.
  function showProblem(text) {
    var box = document.getElementById('notice');
    if (!box) {
      box = document.getElementById('toast');
      if (!box) {
        box = document.createElement('div');
        box.id = 'toast';
        box.className = 'notice toast';
        box.setAttribute('role', 'alert');
        box.setAttribute('data-testid', 'toast');
        document.body.appendChild(box);
      }
    }
    box.textContent = text;
  }
  // A 422 carries the form again with the reason it was refused (the task panel): show
  // it in place instead of as an error notice.
  document.addEventListener('htmx:beforeSwap', function (e) {
    if (e.detail.xhr && e.detail.xhr.status === 422) {
      e.detail.shouldSwap = true;
      e.detail.isError = false;
    }
  });
  document.addEventListener('htmx:responseError', function (e) {
    var xhr = e.detail && e.detail.xhr;
    var text = xhr && xhr.responseText ? xhr.responseText.trim() : '';
    if (!text || text.length > 500 || text.charAt(0) === '<') text = 'The request failed (HTTP ' + (xhr ? xhr.status : '?') + ').';
    showProblem(text);
  });
  document.addEventListener('htmx:sendError', function () {
    showProblem('Could not reach Atrium. Check your connection and try again.');
  });

  // (9) A chat opened at a search result (?at=) shows that message, highlighted by the
  // server, instead of the bottom; "Load newer" pages may repeat messages that arrived
  // live below them meanwhile, so the later copy of an id goes.
  function jumpToTarget() {
    var t = document.querySelector('#messages .msg.jump-target');
    if (!t) return false;
    t.scrollIntoView({ block: 'center' });
    stickToBottom = false;
    return true;
  }
  document.addEventListener('htmx:afterSettle', function () {
    var seen = {};
    document.querySelectorAll('#messages > article.msg[id]').forEach(function (m) {
      if (seen[m.id]) m.remove();
      else seen[m.id] = true;
    });
  });

  function start() {
    afterSwaps();
    placeSide();
    watchChat();
    if (document.getElementById('messages') && !jumpToTarget()) scrollToBottom();
    var ta = document.querySelector('#composer textarea[name=text]');
    if (ta && window.matchMedia('(min-width: 721px)').matches) ta.focus();
  }
  if (document.readyState === 'loading') {
    document.addEventListener('DOMContentLoaded', start);
  } else {
    start();
  }
})();
