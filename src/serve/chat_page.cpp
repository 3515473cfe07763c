#include "serve/chat_page.hpp"

namespace syslm::serve {

const std::string& chat_page_html() {
    static const std::string page = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>syslm chat</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font-family:system-ui,sans-serif;max-width:50rem;margin:1rem auto;padding:0 1rem;color:#222}
#log{border:1px solid #ccc;border-radius:6px;padding:.5rem;min-height:20rem;white-space:pre-wrap}
.user{color:#0645ad;margin:.4rem 0}.assistant{margin:.4rem 0 1rem}
#stats{font-size:.85rem;color:#555;margin:.5rem 0}
form{display:flex;gap:.5rem;margin-top:.5rem}#msg{flex:1;padding:.4rem}
</style></head><body>
<h1>syslm</h1>
<div id="stats">connecting…</div>
<div id="log"></div>
<form id="f"><input id="msg" autocomplete="off" placeholder="Say something"><button id="send">Send</button></form>
<script>
const log = document.getElementById('log'), stats = document.getElementById('stats');
const messages = [];
const key = new URLSearchParams(location.search).get('key');
const headers = {'Content-Type': 'application/json'};
if (key) headers['Authorization'] = 'Bearer ' + key;
async function refresh() {
  try {
    const s = await (await fetch('/stats', {headers})).json();
    stats.textContent = `${s.tokens_per_s.toFixed(1)} tok/s · running ${s.running} · waiting ${s.waiting} · KV pages ${s.kv_pages_used}/${s.kv_pages_total}`;
  } catch (e) { stats.textContent = 'server unreachable'; }
}
setInterval(refresh, 1000); refresh();
document.getElementById('f').onsubmit = async (ev) => {
  ev.preventDefault();
  const input = document.getElementById('msg'), text = input.value.trim();
  if (!text) return;
  input.value = '';
  messages.push({role: 'user', content: text});
  const u = document.createElement('div'); u.className = 'user'; u.textContent = '> ' + text; log.appendChild(u);
  const a = document.createElement('div'); a.className = 'assistant'; log.appendChild(a);
  const res = await fetch('/v1/chat/completions', {method: 'POST', headers,
    body: JSON.stringify({messages, stream: true, max_tokens: 256})});
  if (!res.ok) { a.textContent = 'error: ' + (await res.text()); return; }
  const reader = res.body.getReader(), dec = new TextDecoder();
  let buf = '', reply = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buf += dec.decode(value, {stream: true});
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const line = buf.slice(0, i); buf = buf.slice(i + 2);
      if (!line.startsWith('data: ')) continue;
      const data = line.slice(6);
      if (data === '[DONE]') continue;
      const j = JSON.parse(data);
      const d = j.choices && j.choices[0] && j.choices[0].delta;
      if (d && d.content) { reply += d.content; a.textContent = reply; }
    }
  }
  messages.push({role: 'assistant', content: reply});
};
</script></body></html>
)HTML";
    return page;
}

}  // namespace syslm::serve
