#include "serve/chat_page.hpp"

// Each file's bytes in .rodata between a start and an end symbol, by the assembler's .incbin:
// no generated sources, and a megabyte of JavaScript costs the compiler nothing.
#define SYSLM_EMBED(sym, path)                                            \
    __asm__(".section .rodata\n.balign 16\n.global " #sym "_start\n" #sym \
            "_start:\n.incbin \"" path "\"\n.global " #sym "_end\n" #sym  \
            "_end:\n.byte 0\n.previous\n");                               \
    extern "C" const char sym##_start[], sym##_end[];

SYSLM_EMBED(syslm_chat_page, SYSLM_CHAT_PAGE)
SYSLM_EMBED(syslm_notice, SYSLM_NOTICE)
#ifdef SYSLM_MARKED_JS
SYSLM_EMBED(syslm_marked_js, SYSLM_MARKED_JS)
SYSLM_EMBED(syslm_highlight_js, SYSLM_HIGHLIGHT_JS)
SYSLM_EMBED(syslm_highlight_css, SYSLM_HIGHLIGHT_CSS)
SYSLM_EMBED(syslm_purify_js, SYSLM_PURIFY_JS)
#endif

namespace syslm::serve {

namespace {

std::string_view view(const char* b, const char* e) {
    return std::string_view(b, static_cast<size_t>(e - b));
}

}  // namespace

std::string_view chat_page_html() {
    return view(syslm_chat_page_start, syslm_chat_page_end);
}

const std::vector<ChatAsset>& chat_assets() {
#ifdef SYSLM_MARKED_JS
    static const std::vector<ChatAsset> assets = {
        {"marked.js", "text/javascript", view(syslm_marked_js_start, syslm_marked_js_end)},
        {"highlight.js", "text/javascript", view(syslm_highlight_js_start, syslm_highlight_js_end)},
        {"highlight.css", "text/css", view(syslm_highlight_css_start, syslm_highlight_css_end)},
        {"purify.js", "text/javascript", view(syslm_purify_js_start, syslm_purify_js_end)},
        {"licenses.txt", "text/plain; charset=utf-8", view(syslm_notice_start, syslm_notice_end)},
    };
#else
    static const std::vector<ChatAsset> assets;
#endif
    return assets;
}

}  // namespace syslm::serve
