--
-- PostgreSQL database dump
--

\restrict ggMe00btrcwmbtzRTxSVdC3KoVUbYXVscQu1cFJrDVufF16yXSnGGm8M73z1eRV

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: api_keys; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.api_keys (
    id text NOT NULL,
    hash text NOT NULL,
    name text NOT NULL,
    project text NOT NULL,
    admin boolean DEFAULT false NOT NULL,
    created_at double precision NOT NULL,
    last_used_at double precision,
    revoked_at double precision
);


--
-- Name: chunks; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.chunks (
    id bigint NOT NULL,
    vector_store_id text NOT NULL,
    file_id text NOT NULL,
    "position" integer NOT NULL,
    text text NOT NULL,
    place jsonb NOT NULL,
    embedding real[] NOT NULL,
    words tsvector GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, text)) STORED
);


--
-- Name: chunks_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.chunks_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: chunks_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.chunks_id_seq OWNED BY public.chunks.id;


--
-- Name: conversation_items; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.conversation_items (
    conversation_id text NOT NULL,
    "position" integer NOT NULL,
    item_id text NOT NULL,
    item text NOT NULL
);


--
-- Name: conversations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.conversations (
    id text NOT NULL,
    created_at bigint NOT NULL,
    metadata text NOT NULL,
    replica text,
    project text DEFAULT 'default'::text NOT NULL
);


--
-- Name: event_chunks; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.event_chunks (
    response_id text NOT NULL,
    first_sequence integer NOT NULL,
    last_sequence integer NOT NULL,
    events text NOT NULL
);


--
-- Name: file_parts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.file_parts (
    file_id text NOT NULL,
    "position" integer NOT NULL,
    data bytea NOT NULL
);


--
-- Name: files; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.files (
    id text NOT NULL,
    project text NOT NULL,
    filename text NOT NULL,
    purpose text NOT NULL,
    bytes bigint NOT NULL,
    created_at bigint NOT NULL,
    expires_at bigint
);


--
-- Name: input_items; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.input_items (
    response_id text NOT NULL,
    "position" integer NOT NULL,
    item_id text NOT NULL,
    item text NOT NULL
);


--
-- Name: output_items; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.output_items (
    item_id text NOT NULL,
    response_id text NOT NULL
);


--
-- Name: replicas; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.replicas (
    id text NOT NULL,
    url text NOT NULL,
    heartbeat_at double precision NOT NULL,
    draining boolean DEFAULT false NOT NULL
);


--
-- Name: responses; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.responses (
    id text NOT NULL,
    created_at double precision NOT NULL,
    status text NOT NULL,
    response text NOT NULL,
    previous_response_id text,
    background boolean DEFAULT false NOT NULL,
    owner text,
    lease_expires_at double precision,
    cancel_requested boolean DEFAULT false NOT NULL,
    replica text,
    project text DEFAULT 'default'::text NOT NULL,
    inserted bigint NOT NULL
);


--
-- Name: responses_inserted_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.responses_inserted_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: responses_inserted_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.responses_inserted_seq OWNED BY public.responses.inserted;


--
-- Name: schema_migrations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: usage_minutes; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.usage_minutes (
    project text NOT NULL,
    api_key_id text NOT NULL,
    model text NOT NULL,
    minute bigint NOT NULL,
    requests bigint DEFAULT 0 NOT NULL,
    input_tokens bigint DEFAULT 0 NOT NULL,
    cached_tokens bigint DEFAULT 0 NOT NULL,
    output_tokens bigint DEFAULT 0 NOT NULL,
    reasoning_tokens bigint DEFAULT 0 NOT NULL
);


--
-- Name: vector_store_batches; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.vector_store_batches (
    id text NOT NULL,
    vector_store_id text NOT NULL,
    project text NOT NULL,
    created_at bigint NOT NULL,
    cancelled boolean DEFAULT false NOT NULL
);


--
-- Name: vector_store_files; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.vector_store_files (
    vector_store_id text NOT NULL,
    file_id text NOT NULL,
    project text NOT NULL,
    batch_id text,
    filename text NOT NULL,
    status text NOT NULL,
    attributes jsonb NOT NULL,
    chunking text NOT NULL,
    usage_bytes bigint DEFAULT 0 NOT NULL,
    last_error text,
    created_at bigint NOT NULL,
    worker text,
    lease_until double precision
);


--
-- Name: vector_stores; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.vector_stores (
    id text NOT NULL,
    project text NOT NULL,
    name text NOT NULL,
    description text,
    metadata jsonb NOT NULL,
    embedding_model text NOT NULL,
    dimensions integer NOT NULL,
    created_at bigint NOT NULL,
    last_active_at bigint NOT NULL,
    expires_after_days integer
);


--
-- Name: webhook_outbox; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.webhook_outbox (
    id text NOT NULL,
    response_id text NOT NULL,
    type text NOT NULL,
    created_at bigint NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at double precision NOT NULL,
    claimed_by text,
    claimed_until double precision
);


--
-- Name: chunks id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.chunks ALTER COLUMN id SET DEFAULT nextval('public.chunks_id_seq'::regclass);


--
-- Name: responses inserted; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.responses ALTER COLUMN inserted SET DEFAULT nextval('public.responses_inserted_seq'::regclass);


--
-- Data for Name: api_keys; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.api_keys (id, hash, name, project, admin, created_at, last_used_at, revoked_at) FROM stdin;
key_old	abababababababababababababababababababababababababababababababab	ci	team-a	f	1700000003	\N	\N
\.


--
-- Data for Name: chunks; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.chunks (id, vector_store_id, file_id, "position", text, place, embedding) FROM stdin;
\.


--
-- Data for Name: conversation_items; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.conversation_items (conversation_id, "position", item_id, item) FROM stdin;
conv_old	0	msg_c1	{"id": "msg_c1", "type": "message", "role": "user", "content": "c1"}
\.


--
-- Data for Name: conversations; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.conversations (id, created_at, metadata, replica, project) FROM stdin;
conv_old	1700000002	{"k": "v"}	\N	team-a
\.


--
-- Data for Name: event_chunks; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.event_chunks (response_id, first_sequence, last_sequence, events) FROM stdin;
resp_old	0	1	{"type": "response.created", "sequence_number": 0}\n{"type": "response.completed", "sequence_number": 1}
resp_bg	0	0	{"type": "response.completed", "sequence_number": 0}
\.


--
-- Data for Name: file_parts; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.file_parts (file_id, "position", data) FROM stdin;
file-old	0	\\x68656c6c6f
\.


--
-- Data for Name: files; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.files (id, project, filename, purpose, bytes, created_at, expires_at) FROM stdin;
file-old	team-a	notes.txt	user_data	5	1700000004	\N
\.


--
-- Data for Name: input_items; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.input_items (response_id, "position", item_id, item) FROM stdin;
resp_old	0	msg_in	{"id": "msg_in", "type": "message", "role": "user", "content": "hi"}
\.


--
-- Data for Name: output_items; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.output_items (item_id, response_id) FROM stdin;
msg_out	resp_old
\.


--
-- Data for Name: replicas; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.replicas (id, url, heartbeat_at, draining) FROM stdin;
r1	http://127.0.0.1:1	1795844679.791309	f
\.


--
-- Data for Name: responses; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.responses (id, created_at, status, response, previous_response_id, background, owner, lease_expires_at, cancel_requested, replica, project, inserted) FROM stdin;
resp_old	1700000000	completed	{"id": "resp_old", "object": "response", "created_at": 1700000000, "model": "m", "status": "completed", "output": [{"id": "msg_out", "type": "message", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": "hello", "annotations": []}]}], "parallel_tool_calls": true, "tool_choice": "auto", "tools": []}	\N	f	\N	\N	f	r1	team-a	1
resp_bg	1700000001	completed	{"id": "resp_bg", "object": "response", "created_at": 1700000000, "model": "m", "status": "completed", "output": [], "parallel_tool_calls": true, "tool_choice": "auto", "tools": []}	\N	t	old-owner	1795848279.782322	f	\N	team-a	2
\.


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.schema_migrations (version, applied_at) FROM stdin;
1	2026-11-28 05:44:39.729066+00
2	2026-11-28 05:44:39.729066+00
3	2026-11-28 05:44:39.729066+00
4	2026-11-28 05:44:39.729066+00
5	2026-11-28 05:44:39.729066+00
6	2026-11-28 05:44:39.729066+00
7	2026-11-28 05:44:39.729066+00
8	2026-11-28 05:44:39.729066+00
9	2026-11-28 05:44:39.729066+00
10	2026-11-28 05:44:39.729066+00
11	2026-11-28 05:44:39.729066+00
\.


--
-- Data for Name: usage_minutes; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.usage_minutes (project, api_key_id, model, minute, requests, input_tokens, cached_tokens, output_tokens, reasoning_tokens) FROM stdin;
team-a	key_old	m	28333333	1	10	5	2	0
\.


--
-- Data for Name: vector_store_batches; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.vector_store_batches (id, vector_store_id, project, created_at, cancelled) FROM stdin;
\.


--
-- Data for Name: vector_store_files; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.vector_store_files (vector_store_id, file_id, project, batch_id, filename, status, attributes, chunking, usage_bytes, last_error, created_at, worker, lease_until) FROM stdin;
\.


--
-- Data for Name: vector_stores; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.vector_stores (id, project, name, description, metadata, embedding_model, dimensions, created_at, last_active_at, expires_after_days) FROM stdin;
\.


--
-- Data for Name: webhook_outbox; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.webhook_outbox (id, response_id, type, created_at, attempts, next_attempt_at, claimed_by, claimed_until) FROM stdin;
evt_242354dec7b9a0c1587b4372b8e1fdb5	resp_bg	response.completed	1795844680	0	1795844679.78448	\N	\N
\.


--
-- Name: chunks_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.chunks_id_seq', 1, false);


--
-- Name: responses_inserted_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.responses_inserted_seq', 2, true);


--
-- Name: api_keys api_keys_hash_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_keys
    ADD CONSTRAINT api_keys_hash_key UNIQUE (hash);


--
-- Name: api_keys api_keys_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_keys
    ADD CONSTRAINT api_keys_pkey PRIMARY KEY (id);


--
-- Name: chunks chunks_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.chunks
    ADD CONSTRAINT chunks_pkey PRIMARY KEY (id);


--
-- Name: conversation_items conversation_items_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.conversation_items
    ADD CONSTRAINT conversation_items_pkey PRIMARY KEY (conversation_id, "position");


--
-- Name: conversations conversations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.conversations
    ADD CONSTRAINT conversations_pkey PRIMARY KEY (id);


--
-- Name: event_chunks event_chunks_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.event_chunks
    ADD CONSTRAINT event_chunks_pkey PRIMARY KEY (response_id, first_sequence);


--
-- Name: file_parts file_parts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.file_parts
    ADD CONSTRAINT file_parts_pkey PRIMARY KEY (file_id, "position");


--
-- Name: files files_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.files
    ADD CONSTRAINT files_pkey PRIMARY KEY (id);


--
-- Name: input_items input_items_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.input_items
    ADD CONSTRAINT input_items_pkey PRIMARY KEY (response_id, "position");


--
-- Name: output_items output_items_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.output_items
    ADD CONSTRAINT output_items_pkey PRIMARY KEY (item_id, response_id);


--
-- Name: replicas replicas_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.replicas
    ADD CONSTRAINT replicas_pkey PRIMARY KEY (id);


--
-- Name: responses responses_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.responses
    ADD CONSTRAINT responses_pkey PRIMARY KEY (id);


--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);


--
-- Name: usage_minutes usage_minutes_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_minutes
    ADD CONSTRAINT usage_minutes_pkey PRIMARY KEY (project, api_key_id, model, minute);


--
-- Name: vector_store_batches vector_store_batches_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.vector_store_batches
    ADD CONSTRAINT vector_store_batches_pkey PRIMARY KEY (id);


--
-- Name: vector_store_files vector_store_files_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.vector_store_files
    ADD CONSTRAINT vector_store_files_pkey PRIMARY KEY (vector_store_id, file_id);


--
-- Name: vector_stores vector_stores_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.vector_stores
    ADD CONSTRAINT vector_stores_pkey PRIMARY KEY (id);


--
-- Name: webhook_outbox webhook_outbox_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_outbox
    ADD CONSTRAINT webhook_outbox_pkey PRIMARY KEY (id);


--
-- Name: chunks_by_file; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX chunks_by_file ON public.chunks USING btree (vector_store_id, file_id);


--
-- Name: chunks_words; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX chunks_words ON public.chunks USING gin (words);


--
-- Name: conversation_items_by_id; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX conversation_items_by_id ON public.conversation_items USING btree (conversation_id, item_id);


--
-- Name: conversation_items_by_item; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX conversation_items_by_item ON public.conversation_items USING btree (item_id);


--
-- Name: files_by_project; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX files_by_project ON public.files USING btree (project, created_at);


--
-- Name: input_items_by_item; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX input_items_by_item ON public.input_items USING btree (item_id);


--
-- Name: output_items_by_response; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX output_items_by_response ON public.output_items USING btree (response_id);


--
-- Name: responses_by_age; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX responses_by_age ON public.responses USING btree (created_at);


--
-- Name: responses_by_project; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX responses_by_project ON public.responses USING btree (project, created_at, inserted);


--
-- Name: responses_running; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX responses_running ON public.responses USING btree (status) WHERE (status = ANY (ARRAY['queued'::text, 'in_progress'::text]));


--
-- Name: usage_minutes_by_minute; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX usage_minutes_by_minute ON public.usage_minutes USING btree (minute);


--
-- Name: usage_minutes_by_project; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX usage_minutes_by_project ON public.usage_minutes USING btree (project, minute);


--
-- Name: vector_store_files_in_progress; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX vector_store_files_in_progress ON public.vector_store_files USING btree (status, lease_until);


--
-- Name: vector_stores_by_project; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX vector_stores_by_project ON public.vector_stores USING btree (project, id);


--
-- Name: webhook_outbox_due; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX webhook_outbox_due ON public.webhook_outbox USING btree (next_attempt_at);


--
-- Name: chunks chunks_vector_store_id_file_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.chunks
    ADD CONSTRAINT chunks_vector_store_id_file_id_fkey FOREIGN KEY (vector_store_id, file_id) REFERENCES public.vector_store_files(vector_store_id, file_id) ON DELETE CASCADE;


--
-- Name: conversation_items conversation_items_conversation_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.conversation_items
    ADD CONSTRAINT conversation_items_conversation_id_fkey FOREIGN KEY (conversation_id) REFERENCES public.conversations(id) ON DELETE CASCADE;


--
-- Name: event_chunks event_chunks_response_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.event_chunks
    ADD CONSTRAINT event_chunks_response_id_fkey FOREIGN KEY (response_id) REFERENCES public.responses(id) ON DELETE CASCADE;


--
-- Name: file_parts file_parts_file_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.file_parts
    ADD CONSTRAINT file_parts_file_id_fkey FOREIGN KEY (file_id) REFERENCES public.files(id) ON DELETE CASCADE;


--
-- Name: input_items input_items_response_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.input_items
    ADD CONSTRAINT input_items_response_id_fkey FOREIGN KEY (response_id) REFERENCES public.responses(id) ON DELETE CASCADE;


--
-- Name: output_items output_items_response_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.output_items
    ADD CONSTRAINT output_items_response_id_fkey FOREIGN KEY (response_id) REFERENCES public.responses(id) ON DELETE CASCADE;


--
-- Name: vector_store_batches vector_store_batches_vector_store_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.vector_store_batches
    ADD CONSTRAINT vector_store_batches_vector_store_id_fkey FOREIGN KEY (vector_store_id) REFERENCES public.vector_stores(id) ON DELETE CASCADE;


--
-- Name: vector_store_files vector_store_files_vector_store_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.vector_store_files
    ADD CONSTRAINT vector_store_files_vector_store_id_fkey FOREIGN KEY (vector_store_id) REFERENCES public.vector_stores(id) ON DELETE CASCADE;


--
-- PostgreSQL database dump complete
--

\unrestrict ggMe00btrcwmbtzRTxSVdC3KoVUbYXVscQu1cFJrDVufF16yXSnGGm8M73z1eRV

