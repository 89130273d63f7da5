"""Writes verifiers/envs/workplace/seeds.jsonl: human-written workplace seeds (kept as code for readability). Run from the repo root."""
import json


def ev(title, date, time, dur=30, att=()):
    return {"title": title, "date": date, "time": time, "duration_minutes": dur, "attendees": list(att)}
def em(frm, subject, body, folder="inbox"):
    return {"from": frm, "to": ["me@acme.example"], "subject": subject, "body": body, "folder": folder}
def ct(name, email, company):
    return {"name": name, "email": email, "company": company}
def tk(pid, title, assignee, status="todo", priority="medium"):
    return {"project_id": pid, "title": title, "assignee": assignee, "status": status, "priority": priority}
def st(**tables):
    base = {t: {} for t in ("emails", "events", "projects", "tasks", "contacts", "deals", "interactions")}
    base.update(tables)
    return base
def c(tool, **args):
    return {"tool": tool, "args": args}

CAL = ["list_events", "create_event", "update_event", "cancel_event"]
MAIL = ["search_emails", "read_email", "send_email", "reply_email", "archive_email", "delete_email"]
PROJ = ["find_project", "list_tasks", "create_task", "update_task", "delete_task"]
CRM = ["find_contact", "list_deals", "update_deal_stage", "log_interaction"]
EVSTATE = lambda: st(events={"{ev1}": ev("{title}", "{date}", "{old_time}"), "{ev2}": ev("{other_title}", "{date}", "{other_time}")})
EVSLOTS = {"title": "meeting_title", "other_title": "meeting_title", "date": "date", "old_time": "time",
           "other_time": "time", "ev1": "event_id", "ev2": "event_id"}
EVVALS = {"title": "Budget review", "other_title": "Hiring plan sync", "date": "2026-03-02", "old_time": "10:00",
          "other_time": "14:30", "ev1": "EVT-4821", "ev2": "EVT-1377"}
seeds = [
 dict(id="wp-reschedule", category="calendar", tools=CAL[:3],
      templates=["Move my '{title}' meeting on {date} to {new_time}.", "Can you push the {title} on {date} so it starts at {new_time}?"],
      slots={**EVSLOTS, "new_time": "time"}, values={**EVVALS, "new_time": "15:00"}, state=EVSTATE(),
      calls=[c("list_events", date="{date}"), c("update_event", event_id="{ev1}", time="{new_time}")]),
 dict(id="wp-reschedule-cancel-offered", category="calendar", tools=CAL,
      templates=["The {title} on {date} clashes with something else; move it to {new_time} instead.",
                 "Resolve my conflict on {date}: shift '{title}' to {new_time}. Keep the meeting."],
      slots={**EVSLOTS, "new_time": "time"}, values={**EVVALS, "new_time": "16:15"}, state=EVSTATE(),
      calls=[c("list_events", date="{date}"), c("update_event", event_id="{ev1}", time="{new_time}")],
      notes="cancel_event is offered but must not be used"),
 dict(id="wp-cancel", category="calendar", tools=CAL,
      templates=["Cancel the '{title}' on {date}.", "Please drop {title} from my calendar on {date}; it is not happening."],
      slots=EVSLOTS, values=EVVALS, state=EVSTATE(),
      calls=[c("list_events", date="{date}"), c("cancel_event", event_id="{ev1}")]),
 dict(id="wp-move-date", category="calendar", tools=CAL[:3],
      templates=["Push the {title} from {date} to {new_date}, same time.", "Move '{title}' ({date}) to {new_date}; keep the start time."],
      slots={**EVSLOTS, "new_date": "date"}, values={**EVVALS, "new_date": "2026-03-09"}, state=EVSTATE(),
      calls=[c("list_events", date="{date}"), c("update_event", event_id="{ev1}", date="{new_date}")]),
 dict(id="wp-invite-contact", category="calendar", tools=["find_contact", "create_event", "list_events"],
      templates=["Set up a {dur}-minute meeting called '{title}' with {name} on {date} at {time}.",
                 "Book {dur} minutes with {name} on {date} at {time}, titled '{title}'."],
      slots={"dur": "duration_minutes", "title": "meeting_title", "name": "person_name", "other": "person_name",
             "date": "date", "time": "time", "email": "email", "other_email": "email", "company": "company", "c1": "contact_id", "c2": "contact_id"},
      values={"dur": 45, "title": "Vendor contract review", "name": "Maria Lopez", "other": "James Okafor", "date": "2026-04-14",
              "time": "11:00", "email": "maria.lopez@globex.example", "other_email": "james.okafor@initech.example",
              "company": "Globex Corp", "c1": "CON-1001", "c2": "CON-1002"},
      state=st(contacts={"{c1}": ct("{name}", "{email}", "{company}"), "{c2}": ct("{other}", "{other_email}", "{company}")}),
      calls=[c("find_contact", name="{name}"), c("create_event", title="{title}", date="{date}", time="{time}",
                                                   duration_minutes="{dur}", attendees=["{email}"])]),
 dict(id="wp-reply", category="email", tools=MAIL[:5],
      templates=["Reply to {name}'s email about '{subject}' saying: {body}", "Answer the '{subject}' mail from {name} with: {body}"],
      slots={"name": "person_name", "email": "email", "other_email": "email", "subject": "subject", "other_subject": "subject",
             "body": "body", "e1": "message_id", "e2": "message_id"},
      values={"name": "Aisha Chen", "email": "aisha.chen@acme.example", "other_email": "wei.novak@acme.example",
              "subject": "Budget review notes", "other_subject": "Onboarding", "body": "thanks for the quick turnaround",
              "e1": "MSG-10001", "e2": "MSG-10002"},
      state=st(emails={"{e1}": em("{email}", "{subject}", "From {name}: see attached."), "{e2}": em("{other_email}", "{other_subject}", "FYI.")}),
      calls=[c("search_emails", query="{subject}"), c("reply_email", email_id="{e1}", body="{body}")]),
 dict(id="wp-archive", category="email", tools=MAIL[:5],
      templates=["Archive the email from {email} with subject '{subject}'.", "File away '{subject}' (sent by {email}) into the archive."],
      slots={"email": "email", "other_email": "email", "subject": "subject", "other_subject": "subject", "e1": "message_id", "e2": "message_id"},
      values={"email": "olga.berg@northwind.example", "other_email": "ravi.patel@acme.example", "subject": "Pricing update",
              "other_subject": "Security audit notes", "e1": "MSG-20001", "e2": "MSG-20002"},
      state=st(emails={"{e1}": em("{email}", "{subject}", "Details inside."), "{e2}": em("{other_email}", "{other_subject}", "Please read.")}),
      calls=[c("search_emails", query="{subject}"), c("archive_email", email_id="{e1}")]),
 dict(id="wp-delete-email", category="email", tools=MAIL,
      templates=["Delete the email '{subject}' from {email}.", "Permanently remove the '{subject}' message that {email} sent."],
      slots={"email": "email", "other_email": "email", "subject": "subject", "other_subject": "subject", "e1": "message_id", "e2": "message_id"},
      values={"email": "kwame.rossi@globex.example", "other_email": "emma.silva@acme.example", "subject": "Offsite planning",
              "other_subject": "Board deck", "e1": "MSG-30001", "e2": "MSG-30002"},
      state=st(emails={"{e1}": em("{email}", "{subject}", "Old thread."), "{e2}": em("{other_email}", "{other_subject}", "Draft attached.")}),
      calls=[c("search_emails", query="{subject}"), c("delete_email", email_id="{e1}")]),
 dict(id="wp-archive-all-from", category="email", tools=MAIL,
      templates=["Archive every email from {email}.", "Move all mail sent by {email} to the archive."],
      slots={"email": "email", "other_email": "email", "s1": "subject", "s2": "subject", "s3": "subject",
             "e1": "message_id", "e2": "message_id", "e3": "message_id"},
      values={"email": "diego.haddad@umbrella.example", "other_email": "yuki.tanaka@acme.example", "s1": "Q3 roadmap",
              "s2": "Vendor contract", "s3": "Launch checklist", "e1": "MSG-40001", "e2": "MSG-40002", "e3": "MSG-40003"},
      state=st(emails={"{e1}": em("{email}", "{s1}", "One."), "{e2}": em("{email}", "{s2}", "Two."), "{e3}": em("{other_email}", "{s3}", "Three.")}),
      calls=[c("search_emails", query="{email}"), c("archive_email", email_id="{e1}"), c("archive_email", email_id="{e2}")],
      notes="destructive delete_email offered; archiving is asked"),
 dict(id="wp-email-contact", category="email", tools=["find_contact", "send_email"],
      templates=["Email {name} at their CRM address with subject '{subject}' and body '{body}'.",
                 "Send {name} (look them up in the CRM) a mail titled '{subject}': {body}"],
      slots={"name": "person_name", "other": "person_name", "email": "email", "other_email": "email", "company": "company",
             "subject": "subject", "body": "body", "c1": "contact_id", "c2": "contact_id"},
      values={"name": "Fatima Schmidt", "other": "Lucas Mensah", "email": "fatima.schmidt@globex.example",
              "other_email": "lucas.mensah@initech.example", "company": "Globex Corp", "subject": "Contract follow-up",
              "body": "the contract is signed and filed", "c1": "CON-2001", "c2": "CON-2002"},
      state=st(contacts={"{c1}": ct("{name}", "{email}", "{company}"), "{c2}": ct("{other}", "{other_email}", "{company}")}),
      calls=[c("find_contact", name="{name}"), c("send_email", to=["{email}"], subject="{subject}", body="{body}")]),
]
PSTATE = lambda tasks: st(projects={"{p1}": {"name": "{project_name}", "owner": "{owner}"}, "{p2}": {"name": "{other_project}", "owner": "{owner}"}}, tasks=tasks)
PSLOTS = {"project_name": "project_name", "other_project": "project_name", "owner": "first_name", "p1": "project_id", "p2": "project_id",
          "t1": "task_id", "t2": "task_id", "t3": "task_id", "title": "task_title", "other_title": "task_title"}
PVALS = {"project_name": "Apollo", "other_project": "Borealis", "owner": "Ingrid", "p1": "PRJ-101", "p2": "PRJ-102",
         "t1": "TASK-5001", "t2": "TASK-5002", "t3": "TASK-5003", "title": "Draft the budget review", "other_title": "Review the hiring plan"}
seeds += [
 dict(id="wp-task-status", category="projects", tools=PROJ[:4],
      templates=["Mark the task '{title}' in project {project_name} as {status}.", "In {project_name}, set '{title}' to {status}."],
      slots={**PSLOTS, "status": "task_status", "old_status": "task_status", "who": "first_name"},
      values={**PVALS, "status": "done", "old_status": "in_progress", "who": "Tomasz"},
      state=PSTATE({"{t1}": tk("{p1}", "{title}", "{who}", "{old_status}"), "{t2}": tk("{p1}", "{other_title}", "{who}", "{old_status}"),
                    "{t3}": tk("{p2}", "{title}", "{who}", "{old_status}")}),
      calls=[c("find_project", name="{project_name}"), c("list_tasks", project_id="{p1}"), c("update_task", task_id="{t1}", status="{status}")]),
 dict(id="wp-reassign", category="projects", tools=PROJ[:4],
      templates=["Reassign '{title}' in {project_name} from {old} to {new}.", "{old} is out; give their task '{title}' ({project_name}) to {new}."],
      slots={**PSLOTS, "old": "first_name", "new": "first_name"}, values={**PVALS, "old": "Priya", "new": "Noah"},
      state=PSTATE({"{t1}": tk("{p1}", "{title}", "{old}"), "{t2}": tk("{p1}", "{other_title}", "{old}"), "{t3}": tk("{p2}", "{title}", "{old}")}),
      calls=[c("find_project", name="{project_name}"), c("list_tasks", project_id="{p1}", assignee="{old}"),
             c("update_task", task_id="{t1}", assignee="{new}")]),
 dict(id="wp-create-task", category="projects", tools=PROJ[:4],
      templates=["Add a task '{title}' to project {project_name} for {who}, priority {priority}.",
                 "Create a {priority}-priority task in {project_name}: '{title}', assigned to {who}."],
      slots={**PSLOTS, "who": "first_name", "priority": "priority"}, values={**PVALS, "who": "Leila", "priority": "high"},
      state=PSTATE({"{t1}": tk("{p1}", "{other_title}", "{owner}")}),
      calls=[c("find_project", name="{project_name}"), c("create_task", project_id="{p1}", title="{title}", assignee="{who}", priority="{priority}")]),
 dict(id="wp-task-priority", category="projects", tools=PROJ,
      templates=["Change the priority of '{title}' in {project_name} to {priority}.", "'{title}' ({project_name}) should be {priority} priority now."],
      slots={**PSLOTS, "priority": "priority", "old_priority": "priority", "who": "first_name"},
      values={**PVALS, "priority": "high", "old_priority": "low", "who": "Hannah"},
      state=PSTATE({"{t1}": tk("{p1}", "{title}", "{who}", "todo", "{old_priority}"), "{t2}": tk("{p1}", "{other_title}", "{who}", "todo", "{old_priority}")}),
      calls=[c("find_project", name="{project_name}"), c("list_tasks", project_id="{p1}"), c("update_task", task_id="{t1}", priority="{priority}")],
      notes="delete_task offered but not asked"),
 dict(id="wp-delete-task", category="projects", tools=PROJ,
      templates=["Delete the task '{title}' from project {project_name}.", "Remove '{title}' from {project_name} for good."],
      slots={**PSLOTS, "who": "first_name"}, values={**PVALS, "who": "Mateo"},
      state=PSTATE({"{t1}": tk("{p1}", "{title}", "{who}"), "{t2}": tk("{p1}", "{other_title}", "{who}"), "{t3}": tk("{p2}", "{title}", "{who}")}),
      calls=[c("find_project", name="{project_name}"), c("list_tasks", project_id="{p1}"), c("delete_task", task_id="{t1}")]),
 dict(id="wp-complete-all", category="projects", tools=PROJ,
      templates=["Mark all of {who}'s tasks in {project_name} as done.", "{who} finished everything in {project_name}: close all their tasks."],
      slots={**PSLOTS, "who": "first_name", "other": "first_name"}, values={**PVALS, "who": "Sofia", "other": "Wei"},
      state=PSTATE({"{t1}": tk("{p1}", "{title}", "{who}", "todo"), "{t2}": tk("{p1}", "{other_title}", "{who}", "in_progress"),
                    "{t3}": tk("{p1}", "{title}", "{other}", "todo")}),
      calls=[c("find_project", name="{project_name}"), c("list_tasks", project_id="{p1}", assignee="{who}"),
             c("update_task", task_id="{t1}", status="done"), c("update_task", task_id="{t2}", status="done")]),
]
CSTATE = lambda stage: st(contacts={"{c1}": ct("{name}", "{email}", "{company}"), "{c2}": ct("{other}", "{other_email}", "{other_company}")},
                          deals={"{d1}": {"company": "{company}", "contact_id": "{c1}", "stage": stage, "amount": "{amount}"},
                                 "{d2}": {"company": "{other_company}", "contact_id": "{c2}", "stage": stage, "amount": "{amount}"}})
CSLOTS = {"name": "person_name", "other": "person_name", "email": "email", "other_email": "email", "company": "company",
          "other_company": "company", "c1": "contact_id", "c2": "contact_id", "d1": "deal_id", "d2": "deal_id", "amount": "amount"}
CVALS = {"name": "Emma Dubois", "other": "Kwame Ivanova", "email": "emma.dubois@northwind.example", "other_email": "kwame.ivanova@hooli.example",
         "company": "Northwind Traders", "other_company": "Hooli Cloud", "c1": "CON-5001", "c2": "CON-5002", "d1": "DEAL-3001",
         "d2": "DEAL-3002", "amount": 12000}
seeds += [
 dict(id="wp-deal-stage", category="crm", tools=CRM,
      templates=["Move the {company} deal to {stage}.", "Update the CRM: the {company} opportunity is now at {stage}."],
      slots={**CSLOTS, "stage": "deal_stage", "old_stage": "deal_stage"}, values={**CVALS, "stage": "negotiation", "old_stage": "proposal"},
      state=CSTATE("{old_stage}"), calls=[c("list_deals", company="{company}"), c("update_deal_stage", deal_id="{d1}", stage="{stage}")]),
 dict(id="wp-log-interaction", category="crm", tools=CRM,
      templates=["Log a {kind} with {name}: {summary}.", "Record in the CRM that I had a {kind} with {name} ({summary})."],
      slots={**CSLOTS, "kind": "interaction_kind", "summary": "summary"}, values={**CVALS, "kind": "call", "summary": "discussed renewal terms"},
      state=CSTATE("proposal"), calls=[c("find_contact", name="{name}"), c("log_interaction", contact_id="{c1}", kind="{kind}", summary="{summary}")]),
 dict(id="wp-deal-won-log", category="crm", tools=CRM,
      templates=["We closed the {company} deal: mark it closed_won and log a call with {name}: {summary}.",
                 "{company} signed! Set their deal to closed_won and note a call with {name} ({summary})."],
      slots={**CSLOTS, "summary": "summary"}, values={**CVALS, "summary": "agreed on a pilot"},
      state=CSTATE("negotiation"),
      calls=[c("list_deals", company="{company}"), c("update_deal_stage", deal_id="{d1}", stage="closed_won"),
             c("find_contact", name="{name}"), c("log_interaction", contact_id="{c1}", kind="call", summary="{summary}")]),
 dict(id="wp-deal-lost-email", category="crm", tools=CRM + ["send_email"],
      templates=["The {company} deal fell through. Mark it closed_lost and email {name} with subject '{subject}' and body '{body}'.",
                 "Close the {company} deal as lost, then send {name} a note titled '{subject}': {body}"],
      slots={**CSLOTS, "subject": "subject", "body": "body"}, values={**CVALS, "subject": "Pricing update", "body": "thanks for the quick turnaround"},
      state=CSTATE("proposal"),
      calls=[c("list_deals", company="{company}"), c("update_deal_stage", deal_id="{d1}", stage="closed_lost"),
             c("find_contact", name="{name}"), c("send_email", to=["{email}"], subject="{subject}", body="{body}")]),
]
MIX = {**EVSLOTS, **{k: v for k, v in CSLOTS.items() if k in ("name", "email", "other", "other_email", "company", "c1", "c2")}}
MIXV = {**EVVALS, **{k: v for k, v in CVALS.items() if k in MIX}}
MIXSTATE = lambda: {**EVSTATE(), "contacts": {"{c1}": ct("{name}", "{email}", "{company}"), "{c2}": ct("{other}", "{other_email}", "{company}")}}
seeds += [
 dict(id="wp-reschedule-notify", category="multi", tools=CAL[:3] + ["find_contact", "send_email"],
      templates=["Move '{title}' on {date} to {new_time} and email {name} with subject 'Moved: {title}' and body 'New time: {new_time}'.",
                 "Shift {title} ({date}) to {new_time}; tell {name} by email, subject 'Moved: {title}', body 'New time: {new_time}'."],
      slots={**MIX, "new_time": "time"}, values={**MIXV, "new_time": "09:30"}, state=MIXSTATE(),
      calls=[c("list_events", date="{date}"), c("update_event", event_id="{ev1}", time="{new_time}"), c("find_contact", name="{name}"),
             c("send_email", to=["{email}"], subject="Moved: {title}", body="New time: {new_time}")]),
 dict(id="wp-cancel-notify", category="multi", tools=CAL + ["find_contact", "send_email"],
      templates=["Cancel {title} on {date} and let {name} know: subject 'Cancelled: {title}', body '{body}'.",
                 "{title} on {date} is off. Cancel it and email {name} (subject 'Cancelled: {title}', body '{body}')."],
      slots={**MIX, "body": "body"}, values={**MIXV, "body": "can we move our sync to next week"}, state=MIXSTATE(),
      calls=[c("list_events", date="{date}"), c("cancel_event", event_id="{ev1}"), c("find_contact", name="{name}"),
             c("send_email", to=["{email}"], subject="Cancelled: {title}", body="{body}")]),
 dict(id="wp-reply-and-task", category="multi", tools=MAIL[:5] + PROJ[:3],
      templates=["Reply to the '{subject}' email with '{body}', then add a task '{title}' in {project_name} for {who}.",
                 "Answer '{subject}' ({body}) and create the follow-up task '{title}' in project {project_name}, assigned to {who}."],
      slots={**{k: PSLOTS[k] for k in ("project_name", "other_project", "owner", "p1", "p2", "title")}, "who": "first_name",
             "email": "email", "subject": "subject", "other_subject": "subject", "body": "body", "e1": "message_id", "e2": "message_id"},
      values={**{k: PVALS[k] for k in ("project_name", "other_project", "owner", "p1", "p2", "title")}, "who": "Diego",
              "email": "noah.fischer@acme.example", "subject": "Incident postmortem", "other_subject": "Design review",
              "body": "here are the notes from today's call", "e1": "MSG-60001", "e2": "MSG-60002"},
      state={**PSTATE({}), "emails": {"{e1}": em("{email}", "{subject}", "Notes?"), "{e2}": em("{email}", "{other_subject}", "Slides.")}},
      calls=[c("search_emails", query="{subject}"), c("reply_email", email_id="{e1}", body="{body}"), c("find_project", name="{project_name}"),
             c("create_task", project_id="{p1}", title="{title}", assignee="{who}")]),
 dict(id="wp-meeting-for-deal", category="multi", tools=["list_deals", "find_contact", "create_event", "update_deal_stage"],
      templates=["Book a {dur}-minute '{title}' with {name} of {company} on {date} at {time}, and move their deal to proposal.",
                 "Schedule '{title}' ({dur} min) with {name} from {company} for {date} {time}; set the {company} deal to proposal."],
      slots={**CSLOTS, "dur": "duration_minutes", "title": "meeting_title", "date": "date", "time": "time"},
      values={**CVALS, "dur": 60, "title": "Pricing update review", "date": "2026-05-20", "time": "13:00"},
      state=CSTATE("qualified"),
      calls=[c("find_contact", name="{name}"), c("create_event", title="{title}", date="{date}", time="{time}", duration_minutes="{dur}",
                                                   attendees=["{email}"]),
             c("list_deals", company="{company}"), c("update_deal_stage", deal_id="{d1}", stage="proposal")]),
]
with open("verifiers/envs/workplace/seeds.jsonl", "w") as f:
    for s in seeds:
        f.write(json.dumps(s) + "\n")
print(len(seeds))
