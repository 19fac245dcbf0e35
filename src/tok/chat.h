/*
 * chat.h — the Inkling chat format: prompt rendering to ids, output parsing on ids, stop ids.
 *
 * Rendering (no template engine) builds the id sequence directly: control tokens are looked up by
 * spelling in the tokenizer (ink_chat_ids) and emitted by id, every payload (system / user / tool text, names, JSON) is encoded with special matching
 * OFF, so a user who types "<|end_message|>" gets ordinary text tokens, never a control token.
 * Order (docs/tokenizer.md, spec tokenizer.md §6.2):
 *   1. tools declared: <|message_system|>tool_declare<|content_xml|>JSON<|end_message|>, JSON being
 *      the tools (each tool's `function` object plus its "type") with all keys sorted, compact
 *      separators, non-ASCII raw — Python json.dumps(sort_keys=True, separators=(',', ':'),
 *      ensure_ascii=False) byte for byte, float spellings included (1e-07, 1e+20, 1.0, -0.0);
 *   2. system / developer messages as <|message_system|><|content_text|>…<|end_message|>;
 *   3. the effort block <|message_system|><|content_text|>Thinking effort level: X<|end_message|>
 *      right before the first non-system message (after everything if there is none);
 *   4. user / assistant / tool messages in order (assistant: thinking block, text block, one block
 *      per tool call, then <|content_model_end_sampling|>);
 *   5. the generation prompt <|message_model|> (unless no_generation_prompt).
 * Effort: a name (none 0, minimal 0.1, low 0.2, medium 0.7, high 0.9, xhigh 0.99, max 0.99) or a
 * number in [0, 0.99], printed with at most two decimals and no trailing zeros ("0", "0.2");
 * default 0.9; anything else is INK_E_INVAL.
 *
 * All strings in the structs below are borrowed, NUL-terminated UTF-8; the caller keeps them alive
 * for the duration of the call. Output ids are appended to a caller-owned ink_tokens.
 */
#ifndef INK_TOK_CHAT_H
#define INK_TOK_CHAT_H

#include "tok/tokenizer.h"

#include <jansson.h>

/* The release checkpoint's control-token ids. Code never uses them: every id is looked up by its
 * spelling in the tokenizer's added tokens (ink_chat_ids_get), so a small model whose tokenizer
 * carries the same tokens at other ids (models/inkling-kjv: 4036..4095) speaks the same format.
 * They stay for tests and documentation. */
enum {
    INK_ID_ENDOFTEXT = 199999,
    INK_ID_MSG_USER = 200000,
    INK_ID_MSG_MODEL = 200001,
    INK_ID_MSG_SYSTEM = 200002,
    INK_ID_MSG_TOOL = 200003,
    INK_ID_TEXT = 200004,
    INK_ID_IMAGE = 200005,
    INK_ID_END_SAMPLING = 200006, /* end of model turn = EOS */
    INK_ID_THINKING = 200008,
    INK_ID_END_MESSAGE = 200010,
    INK_ID_AUDIO_INPUT = 200020,
    INK_ID_TOOL_ERROR = 200022,
    INK_ID_XML = 200024,
    INK_ID_BEGIN_OF_TEXT = 200028,
    INK_ID_INVOKE_JSON = 200049,
    INK_ID_IMAGE_PATCH = 200054,
    INK_ID_INVOKE_TEXT = 200057,
    INK_CHAT_N_VOCAB = 200058, /* the release tokenizer's size */
};

/* The control tokens' ids in one tokenizer, looked up by spelling (special added tokens only).
 * Required (ink_chat_ids_get fails, naming every missing one): <|message_user|>,
 * <|message_model|>, <|message_system|>, <|message_tool|>, <|content_text|>,
 * <|content_thinking|>, <|end_message|>, <|content_model_end_sampling|>,
 * <|content_invoke_tool_json|>, <|content_invoke_tool_text|>, <|content_tool_error|> and
 * <|content_xml|> (older revisions spell it <|unused_200024|>). Optional (-1 when absent):
 * <|endoftext|> (a defensive stop), <|content_image|> + <|unused_200054|> (image placeholder;
 * without them image parts are refused), <|content_audio_input|>, <|begin_of_text|>.
 * Plain data: copy it freely. */
#define INK_CHAT_MAX_STOPS 3
typedef struct ink_chat_ids {
    int32_t endoftext, msg_user, msg_model, msg_system, msg_tool;
    int32_t text, image, end_sampling, thinking, end_message;
    int32_t audio_input, tool_error, xml, begin_of_text, invoke_json, image_patch, invoke_text;
    int32_t stops[INK_CHAT_MAX_STOPS]; /* end_sampling, then the defensive endoftext, msg_user */
    size_t n_stops;
} ink_chat_ids;

/* Fills *ids from tok. INK_E_UNSUPPORTED, listing the missing spellings, if tok lacks a required
 * token (or has it as a non-special token). */
int ink_chat_ids_get(const ink_tokenizer *tok, ink_chat_ids *ids, ink_err *err);

typedef enum ink_chat_role {
    INK_ROLE_SYSTEM,
    INK_ROLE_DEVELOPER, /* rendered as system */
    INK_ROLE_USER,
    INK_ROLE_ASSISTANT,
    INK_ROLE_TOOL,
} ink_chat_role;

typedef enum ink_chat_part_kind { INK_PART_TEXT, INK_PART_IMAGE } ink_chat_part_kind;

typedef struct ink_chat_part {
    ink_chat_part_kind kind;
    const char *text; /* INK_PART_TEXT */
} ink_chat_part;

typedef struct ink_chat_tool_call {
    const char *id;        /* optional: matched by a later tool message's tool_call_id */
    const char *name;      /* required */
    const char *arguments; /* JSON text of the arguments (OpenAI style), or NULL */
    json_t *args;          /* or the parsed arguments (borrowed; wins over `arguments`) */
} ink_chat_tool_call;

typedef struct ink_chat_msg {
    ink_chat_role role;
    const char *content;        /* may be NULL (no content) */
    const ink_chat_part *parts; /* if n_parts > 0: used instead of content, one block per part */
    size_t n_parts;
    const char *reasoning;      /* assistant: reasoning_content (kept in history) */
    const char *name;           /* tool: name of the tool that answered */
    const char *tool_call_id;   /* tool: id of the call answered (name recovered from it) */
    const ink_chat_tool_call *tool_calls; /* assistant */
    size_t n_tool_calls;
} ink_chat_msg;

typedef struct ink_chat_opts {
    const char *effort;        /* name or number ("0.5"); NULL = default (0.9) */
    json_t *tools;             /* OpenAI tools array (borrowed) or NULL */
    int no_generation_prompt;  /* 1: do not append <|message_model|> */
    int allow_image;           /* 1: image parts render as <|content_image|><|unused_200054|> (one
                                  placeholder; a processor expands it). 0: INK_E_UNSUPPORTED */
    int text_prefill;          /* 1: when effort is 0, append <|content_text|> after the prompt
                                  (not template behaviour: forces a visible answer) */
    int continuation;          /* 1: the messages continue an earlier rendering (a chat's next
                                  turn appended to its history ids): no tool block, no effort block */
} ink_chat_opts;

/* Parses an effort name or number into [0, 0.99]. INK_E_INVAL otherwise. NULL gives 0.9. */
int ink_chat_effort(const char *s, double *out, ink_err *err);
/* Formats an effort like the template: "0", "0.2", "0.99". buf needs 8 bytes. */
void ink_chat_effort_str(double v, char buf[8]);

/* Checks that tok has the Inkling control tokens (ink_chat_ids_get without the ids). */
int ink_chat_check_tokenizer(const ink_tokenizer *tok, ink_err *err);

/* Renders messages to ids appended to out (on error out->n is unchanged). opts may be NULL. */
int ink_chat_render(const ink_tokenizer *tok, const ink_chat_msg *msgs, size_t n_msgs,
                    const ink_chat_opts *opts, ink_tokens *out, ink_err *err);
/* Same from an OpenAI-style `messages` JSON array: {role, content (string | null | [{type:"text",
 * text} | {type:"image_url"|"image"|"input_image", ...}]), name, tool_call_id, reasoning_content
 * (or reasoning), tool_calls: [{id, function: {name, arguments (string or object)}}]}. Errors name
 * the offending element, e.g. "messages[2].tool_calls[0].function.arguments: not valid JSON". */
int ink_chat_render_json(const ink_tokenizer *tok, json_t *messages, const ink_chat_opts *opts,
                         ink_tokens *out, ink_err *err);

/* Python-compatible canonical JSON (sort_keys, compact, ensure_ascii=False, Python float repr).
 * *out is malloc'd and NUL-terminated; caller free()s. sort: 1 sorts object keys recursively. */
int ink_json_canonical(json_t *v, int sort, char **out, size_t *len, ink_err *err);

/* Stop ids of c: <|content_model_end_sampling|> (end of model turn), then the defensive
 * <|endoftext|> (when present) and <|message_user|>. *ids points into c. */
size_t ink_chat_stop_ids(const ink_chat_ids *c, const int32_t **ids);
int ink_chat_is_stop(const ink_chat_ids *c, int32_t id);

/* ---- output parsing on ids ---------------------------------------------------------------------
 * Generated ids (after a prompt ending in <|message_model|>) form blocks: [NAME] KIND payload
 * <|end_message|>, <|message_model|> opening each later block, a stop id ending the turn. The
 * first block is header-less. The NAME before a tool kind is metadata, never content. Text that
 * appears outside any block (no kind token) is returned as a TEXT block. */
typedef enum ink_block_kind {
    INK_BLOCK_TEXT,
    INK_BLOCK_THINKING,
    INK_BLOCK_TOOL_CALL,  /* <|content_invoke_tool_json|>: payload {"name":…,"args":{…}} */
    INK_BLOCK_TOOL_TEXT,  /* <|content_invoke_tool_text|>: raw-text tool call */
    INK_BLOCK_TOOL_ERROR, /* <|content_tool_error|> */
} ink_block_kind;

typedef enum ink_chat_event_type {
    INK_EV_BLOCK_START, /* kind, name */
    INK_EV_DELTA,       /* kind, text/len: complete UTF-8 only */
    INK_EV_BLOCK_END,   /* kind; closed = 1 if <|end_message|> was seen */
    INK_EV_STOP,        /* stop_id */
} ink_chat_event_type;

typedef struct ink_chat_event {
    ink_chat_event_type type;
    ink_block_kind kind;
    const char *name; /* BLOCK_START: header text ("" if none) */
    const char *text; /* DELTA */
    size_t len;
    int closed;
    int32_t stop_id;
} ink_chat_event;

typedef struct ink_chat_parser ink_chat_parser;
/* Fails like ink_chat_ids_get when tok lacks the control tokens. */
int ink_chat_parser_new(ink_chat_parser **out, const ink_tokenizer *tok, ink_err *err);
/* The ids the parser resolved (borrowed, lives as long as p). */
const ink_chat_ids *ink_chat_parser_ids(const ink_chat_parser *p);
void ink_chat_parser_free(ink_chat_parser *p);
/* Feeds one id; fills up to 4 events in ev (borrowed until the next call), *n_ev their number.
 * After a stop id further ids produce no events. */
int ink_chat_parser_feed(ink_chat_parser *p, int32_t id, ink_chat_event ev[4], size_t *n_ev,
                         ink_err *err);
/* End of input without a stop id: closes an open block (closed = 0). */
void ink_chat_parser_finish(ink_chat_parser *p, ink_chat_event ev[4], size_t *n_ev);

typedef struct ink_chat_block {
    ink_block_kind kind;
    char *name; /* malloc'd, "" if none */
    char *text; /* malloc'd, NUL-terminated payload */
    size_t len;
    int closed;
} ink_chat_block;

typedef struct ink_chat_output {
    ink_chat_block *blocks;
    size_t n;
    int stopped;     /* a stop id was seen */
    int32_t stop_id; /* which (-1 if none) */
} ink_chat_output;

/* Parses a whole id sequence. On success the caller frees *out with ink_chat_output_free. */
int ink_chat_parse(const ink_tokenizer *tok, const int32_t *ids, size_t n, ink_chat_output *out,
                   ink_err *err);
void ink_chat_output_free(ink_chat_output *o);

#endif
