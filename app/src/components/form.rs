//! Accessible form building blocks: labelled fields whose error messages are tied to the input
//! (`aria-describedby`, `aria-invalid`), an alert banner for form-wide errors, a submit button
//! that shows progress.

use cardpool_domain::AppError;
use leptos::prelude::*;

/// The classes of a text input, as every form draws one (ring, focus, the invalid state).
pub const INPUT: &str = "block w-full rounded-lg border-0 px-3 py-2 text-slate-900 shadow-sm ring-1 ring-inset ring-slate-300 placeholder:text-slate-400 focus:ring-2 focus:ring-inset focus:ring-indigo-600 aria-[invalid=true]:ring-red-500";

/// The message for `field` in the latest result of an action, if it failed validation there.
pub fn field_error<T>(value: MappedSignal<Option<Result<T, AppError>>>, field: &'static str) -> Signal<Option<String>>
where
    T: Send + Sync + 'static,
{
    Signal::derive(move || {
        value.with(|v| match v {
            Some(Err(err)) => err.field(field).map(str::to_owned),
            _ => None,
        })
    })
}

/// A form-wide message for errors that do not belong to one field.
pub fn form_error<T>(value: MappedSignal<Option<Result<T, AppError>>>) -> Signal<Option<String>>
where
    T: Send + Sync + 'static,
{
    Signal::derive(move || {
        value.with(|v| match v {
            Some(Err(AppError::Validation { fields, message })) if fields.is_empty() => Some(message.clone()),
            Some(Err(AppError::Validation { .. })) | Some(Ok(_)) | None => None,
            Some(Err(err)) => Some(err.to_string()),
        })
    })
}

#[component]
pub fn Field(
    #[prop(into)] label: String,
    name: &'static str,
    #[prop(default = "text")] input_type: &'static str,
    #[prop(default = "off")] autocomplete: &'static str,
    #[prop(optional, into)] hint: Option<String>,
    #[prop(into)] error: Signal<Option<String>>,
    /// Initial value.
    #[prop(optional, into)]
    value: Option<String>,
    /// Distinguishes fields of the same name when a page has several such forms.
    #[prop(optional, into)]
    id_suffix: Option<String>,
) -> impl IntoView {
    let id = match id_suffix {
        Some(suffix) => format!("field-{name}-{suffix}"),
        None => format!("field-{name}"),
    };
    let error_id = format!("{id}-error");
    let hint_id = format!("{id}-hint");
    let has_hint = hint.is_some();
    let described_by = {
        let (error_id, hint_id) = (error_id.clone(), hint_id.clone());
        move || {
            let mut ids = Vec::new();
            if has_hint {
                ids.push(hint_id.clone());
            }
            if error.get().is_some() {
                ids.push(error_id.clone());
            }
            (!ids.is_empty()).then(|| ids.join(" "))
        }
    };
    view! {
        <div class="space-y-1">
            <label for=id.clone() class="block text-sm font-medium text-slate-800">
                {label}
            </label>
            <input
                id=id
                name=name
                type=input_type
                autocomplete=autocomplete
                value=value
                aria-invalid=move || if error.get().is_some() { "true" } else { "false" }
                aria-describedby=described_by
                class=INPUT
            />
            {hint.map(|hint| view! { <p id=hint_id class="text-xs text-slate-500">{hint}</p> })}
            <p id=error_id class="text-sm text-red-700" class:hidden=move || error.get().is_none()>
                {move || error.get()}
            </p>
        </div>
    }
}

/// A banner announced to screen readers when a form fails as a whole.
#[component]
pub fn FormAlert(#[prop(into)] message: Signal<Option<String>>) -> impl IntoView {
    view! {
        <div
            role="alert"
            class="rounded-lg bg-red-50 px-4 py-3 text-sm text-red-800 ring-1 ring-red-200"
            class:hidden=move || message.get().is_none()
        >
            {move || message.get()}
        </div>
    }
}

#[component]
pub fn SubmitButton(#[prop(into)] label: String, #[prop(into)] pending: Signal<bool>) -> impl IntoView {
    view! {
        <button type="submit" class="btn-primary w-full" disabled=move || pending.get() aria-busy=move || pending.get().to_string()>
            <Show when=move || pending.get()>
                <span class="inline-block h-4 w-4 animate-spin rounded-full border-2 border-white/40 border-t-white" aria-hidden="true"></span>
            </Show>
            {label}
        </button>
    }
}
